"""Packaging: a candidate's kernel as an installable package (`harness export`)."""
