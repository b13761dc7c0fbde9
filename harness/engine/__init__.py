"""Evaluating candidates: build (with a cache), check against the reference,
time, and a verdict. The worker processes (engine/workers) run the problem and
candidate code; this process only orchestrates them over a channel."""
