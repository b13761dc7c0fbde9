"""The child processes, one module per role: build, reference and
candidate. Started as `python -m harness.engine.workers ROLE FD`."""
