"""Suites: many problems, each with its candidates, evaluated through the engine's pool on
every GPU of the host (`harness bench`); the records, their summary and plot."""
