"""The harness's version, recorded with every result (a leaf, so the engine can read it)."""

__version__ = "0.1.0"
