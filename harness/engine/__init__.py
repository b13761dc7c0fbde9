"""Evaluating candidates: build (building/), the processes started (children.py, over processes/),
check (checking/), time (timing/), a verdict (judge.py, verdicts.py) and, where asked, a profile
(profiling/); evaluate.py runs these phases in order. The worker processes (workers/) run the
problem and candidate code; this process only orchestrates them over a channel."""
