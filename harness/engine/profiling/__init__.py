"""The profile phase: one forward under Nsight Compute or the torch profiler (profile.py), ncu's
output read into kernels and findings (ncu.py), the torch profiler's trace (torch_trace.py)."""
