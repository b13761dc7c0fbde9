"""The torch profiler's trace as profile records: the fallback where ncu cannot run.

Pure: the events of a Kineto (chrome) trace, as `torch.profiler`'s
`export_chrome_trace` writes them, in; KernelProfile records out. On a GPU each
"kernel" event is one launch, and Kineto's args give its grid, block, registers
per thread, shared memory and estimated achieved occupancy. On a CPU there are no
kernels: each op name's self time (its duration less that of the ops it called)
summed over its calls, which is what a CPU forward spends where.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional

from ...profiles import KernelProfile
from .ncu import classify

# Kineto's names for a kernel launch's facts in its trace event's args
GRID, BLOCK, REGISTERS, SHARED, OCCUPANCY = ("grid", "block", "registers per thread", "shared memory",
                                             "est. achieved occupancy %")


def _dims(value: Any) -> Optional[list[int]]:
    return [int(v) for v in value] if isinstance(value, list) and len(value) == 3 else None


def _int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) else None


def gpu_kernels(events: list[dict]) -> list[KernelProfile]:
    """One record per kernel launch, in launch order."""
    kernels = []
    for e in sorted((e for e in events if e.get("cat", "").lower() == "kernel"), key=lambda e: e.get("ts", 0)):
        args = e.get("args", {})
        occupancy = args.get(OCCUPANCY)
        k = KernelProfile(str(e.get("name", "?")), float(e.get("dur", 0.0)), grid=_dims(args.get(GRID)),
                          block=_dims(args.get(BLOCK)), registers=_int(args.get(REGISTERS)),
                          shared_mem_bytes=_int(args.get(SHARED)),
                          achieved_occupancy=float(occupancy) if isinstance(occupancy, (int, float)) else None)
        k.bottleneck = classify(k)
        kernels.append(k)
    return kernels


def cpu_ops(events: list[dict]) -> list[KernelProfile]:
    """One record per op name with its self time, in order of first call; ops with none left out."""
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    self_us: dict[str, float] = {}
    for ops in by_thread.values():
        open_ops: list[tuple[float, str]] = []  # (end, name) of the ops enclosing the current one
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))  # a caller before the ops it calls at the same instant
        for e in ops:
            start, dur, name = float(e["ts"]), float(e["dur"]), str(e["name"])
            while open_ops and open_ops[-1][0] <= start:
                open_ops.pop()
            self_us[name] = self_us.get(name, 0.0) + dur
            if open_ops:  # the caller's self time excludes this call
                caller = open_ops[-1][1]
                self_us[caller] -= dur
            open_ops.append((start + dur, name))
    return [KernelProfile(name, us) for name, us in self_us.items() if us > 0]


def parse_trace(events: list[dict], on_gpu: bool) -> list[KernelProfile]:
    return gpu_kernels(events) if on_gpu else cpu_ops(events)


# GPU activities a trace records on a stream; the marker is torch.cuda._sleep's kernel
_GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
MARKER = "spin_kernel"


def outside_windows(events: list[dict]) -> tuple[dict[str, float], int]:
    """Work on other streams that ran outside the calls' windows, from a trace of calls each bracketed by
    two marker kernels on the caller's stream: a long spin before the call (queued before it, so work
    that does not wait for the caller's stream starts while it spins) and a short one queued once the
    call returned (it starts when the caller's stream has finished the call's work there). A call's
    window runs from the first marker's end to the second's start. Returns ({stream id: the most any
    call's work on it ran outside its window, before it or after it, ms}, calls seen). A stream that
    waits for the caller's stream and that the caller's waits for (an event, a join) runs inside it."""
    work = sorted((e for e in events if str(e.get("cat", "")).lower() in _GPU_WORK and e.get("ph", "X") == "X"),
                  key=lambda e: float(e.get("ts", 0.0)))

    def stream(e: dict) -> str:
        return str(e.get("args", {}).get("stream", e.get("tid", "?")))

    markers = [e for e in work if MARKER in str(e.get("name", ""))]
    if not markers:
        return {}, 0
    caller = stream(markers[0])
    markers = [e for e in markers if stream(e) == caller]
    outside: dict[str, float] = {}
    calls = len(markers) // 2
    for i in range(calls):
        before, after = markers[2 * i], markers[2 * i + 1]
        begin, opened, closed = float(before["ts"]), float(before["ts"]) + float(before.get("dur", 0.0)), \
            float(after["ts"])
        until = float(markers[2 * i + 2]["ts"]) if 2 * i + 2 < len(markers) else float("inf")
        for e in work:
            start = float(e.get("ts", 0.0))
            if stream(e) == caller or not begin <= start < until:
                continue
            end = start + float(e.get("dur", 0.0))
            out = max(0.0, min(end, opened) - start) + max(0.0, end - max(start, closed))
            if out > 0:
                outside[stream(e)] = max(outside.get(stream(e), 0.0), out / 1e3)
    return outside, calls
