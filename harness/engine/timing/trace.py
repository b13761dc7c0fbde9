"""The per-stream trace of a few calls that confirms work hidden from the clock: each call between two marker
kernels on the caller's stream, under the torch profiler (profiling/torch_trace.outside_windows reads it)."""
from __future__ import annotations

import torch

from . import clock
from .clock import Entry

# Taken at import, before any candidate code runs in this process.
_synchronize, _sleep, _urandom_seed = torch.cuda.synchronize, getattr(torch.cuda, "_sleep", None), clock.urandom_seed


# The spin before each traced call: longer than a call's host path, so that work a call does not order
# after the caller's stream starts while it spins (torch_trace.outside_windows).
TRACE_SPIN_MS = 2.0


def trace_calls(timed: Entry, calls: int = 3) -> list[dict]:
    """A few calls under the torch profiler, each between two marker kernels on the caller's stream, a
    long spin before and a short one after (torch_trace.outside_windows reads which streams ran work
    outside that window): the Kineto trace's events."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    args = [timed.make_args(_urandom_seed()) for _ in range(calls)]
    clock.spin_rate()  # measured before the trace: its kernels would read as markers
    _synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for each in args:
            clock.spin(TRACE_SPIN_MS)
            with torch.no_grad():
                timed.fn(*each)
            _sleep(1000)
            _synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        return json.load(open(f.name)).get("traceEvents", [])
