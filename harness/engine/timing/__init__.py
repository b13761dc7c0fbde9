"""The time phase: candidate and reference timed beside each other, the reference alone, and the
rules that read them (measure.py); the timing loop and its clocks, run in the workers (clock.py);
the speedups read off the timings (speedups.py)."""
