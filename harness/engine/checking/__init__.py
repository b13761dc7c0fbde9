"""The check and shapes phases: trials on fresh inputs, the CUDA graph's replay and the problem's
other shapes (trials.py), compared in the reference process (compare.py)."""
