"""The build phase: the static check and a build child per uncached candidate (builder.py), the
build cache it fills (cache.py), torch's precompiled header the builds share (pch.py), and a built
entry carried from one host to another (shipping.py)."""
