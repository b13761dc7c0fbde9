"""Suites: many problems, each with its candidates, evaluated through the engine's pool on
every GPU of the host, or of a Ray cluster (`harness sweep`); the records, their summary and plot."""
