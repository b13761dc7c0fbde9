"""The timing loop and its stopping rule.

Several callables (candidate, reference, optionally the compiled reference)
are timed interleaved in random order, so clock and thermal drift hit all of
them alike. Each sample gets fresh inputs (from a seed the caller may use to check the
output), a cache flush and, on GPU, CUDA
events on the current stream with a device-wide synchronize before the end
event (work left on other streams is counted). Each sample also keeps the host's
time until the call returned: the GPU is idle when the clock starts, so the part of it
before the first launch is inside the window. Sampling stops when the
relative standard error of every median is under the target, or at a cap.
"""
from __future__ import annotations

import math
import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..results import Timing

# Taken at import, before any candidate code runs in this process.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event


def _cudart():
    """The CUDA runtime torch already loaded, if any (never loads a second copy)."""
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
    return None


def _l2_persistence_reset() -> Optional[Callable[[], int]]:
    """cudaCtxResetPersistingL2Cache, if the runtime is there.

    Lines a kernel marked persisting survive an ordinary flush; resetting them
    before each sample keeps a candidate from carrying its data across calls."""
    return getattr(_cudart(), "cudaCtxResetPersistingL2Cache", None)


_LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize
_STREAM_ACCESS_POLICY_WINDOW = 1  # cudaStreamAttributeAccessPolicyWindow


def l2_persistence(stream: int) -> tuple[int, int]:
    """(the device's persisting-L2 limit, the bytes of the access-policy window on `stream`, a
    cudaStream_t) in bytes; (0, 0) without the runtime. Together they let data outlive the flush."""
    import ctypes

    lib = _cudart()
    if lib is None:
        return 0, 0
    limit = ctypes.c_size_t(0)
    if lib.cudaDeviceGetLimit(ctypes.byref(limit), _LIMIT_PERSISTING_L2) != 0:
        limit.value = 0
    value = (ctypes.c_uint8 * 64)()  # cudaStreamAttrValue: the window's base_ptr, then num_bytes
    window = 0
    if lib.cudaStreamGetAttribute(ctypes.c_void_p(stream), _STREAM_ACCESS_POLICY_WINDOW, value) == 0:
        window = ctypes.c_size_t.from_buffer(value, 8).value
    return limit.value, window


@dataclass
class Timed:
    make_args: Callable[[int], list]  # fresh inputs for one call, from a seed
    fn: Callable
    observe: Optional[Callable[[int, Any], None]] = None  # sees (seed, output) of each timed call


@dataclass
class StopRule:
    target_rel_se: float = 0.01
    min_samples: int = 10
    max_samples: int = 2000
    time_cap: float = 10.0  # seconds for the whole sampling stage
    warmup_calls: int = 3


def rel_se_of_median(samples: list[float]) -> float:
    """Relative standard error of the median, from a robust (IQR) spread."""
    n = len(samples)
    if n < 4:
        return math.inf
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    median = statistics.median(samples)
    sigma = (q3 - q1) / 1.349
    return 1.2533 * sigma / math.sqrt(n) / median if median > 0 else math.inf


def summarize(samples: list[float], method: str, wall: list[float], overhead: float = 0.0,
              submit: Optional[list[float]] = None) -> Timing:
    if len(samples) >= 2:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = q3 = samples[0]
    return Timing(median=statistics.median(samples), iqr=q3 - q1, mean=statistics.fmean(samples),
                  min=min(samples), n=len(samples), rel_se=rel_se_of_median(samples), method=method,
                  wall_median=statistics.median(wall), overhead=overhead,
                  submit_median=statistics.median(submit) if submit else 0.0)


def _cpu_cache_bytes() -> int:
    try:
        text = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
        return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text.rstrip("M")) << 20
    except (OSError, ValueError):
        return 32 << 20


class Clock:
    """Measures one call: cache flush, then events (GPU) or perf_counter (CPU)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.reset_persistence = None
        if self.cuda:
            l2 = torch.cuda.get_device_properties(device).L2_cache_size
            self.flush_buffer = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device=device)
            self.synchronize = _synchronize
            self.start, self.end = _Event(enable_timing=True), _Event(enable_timing=True)
            self.reset_persistence = _l2_persistence_reset()
            self.method = "cuda_events"
        else:
            self.flush_buffer = torch.empty(2 * _cpu_cache_bytes(), dtype=torch.uint8)
            self.synchronize = lambda: None
            self.method = "perf_counter"

    def measure(self, timed: Timed, seed: int) -> tuple[float, float, float]:
        """(milliseconds by the device clock, by the host clock, and by the host clock until
        the call returned: on GPU, the device may wait on that part of it inside the window)."""
        args = timed.make_args(seed)
        if self.reset_persistence:
            self.reset_persistence()
        self.flush_buffer.zero_()
        self.synchronize()
        # On a CPU the flush also evicts the interpreter's own path into the call; entering
        # no_grad once warms it, or ~30 us of those misses land on every sample.
        with torch.no_grad():
            pass
        if self.cuda:
            self.start.record()
        t0 = _perf_counter()
        with torch.no_grad():
            output = timed.fn(*args)
        returned = _perf_counter()
        self.synchronize()
        if self.cuda:
            self.end.record()
            self.end.synchronize()
        wall = (_perf_counter() - t0) * 1e3
        if timed.observe:
            timed.observe(seed, output)
        return (self.start.elapsed_time(self.end) if self.cuda else wall), wall, (returned - t0) * 1e3


def time_interleaved(entries: dict[str, Timed], device: torch.device, rule: StopRule) -> dict[str, Timing]:
    rng = random.Random(os.urandom(16))
    clock = Clock(device)
    for timed in entries.values():
        warm = Timed(timed.make_args, timed.fn)  # warm-up calls are neither timed nor observed
        for _ in range(rule.warmup_calls):
            clock.measure(warm, rng.getrandbits(63))
    empty = Timed(lambda seed: [], lambda: None)
    overhead = statistics.median(clock.measure(empty, 0)[0] for _ in range(10))
    samples = {name: [] for name in entries}
    wall = {name: [] for name in entries}
    submit = {name: [] for name in entries}
    order = list(entries)
    started = _perf_counter()
    while True:
        rng.shuffle(order)
        for name in order:
            ms, host_ms, submit_ms = clock.measure(entries[name], rng.getrandbits(63))
            samples[name].append(ms)
            wall[name].append(host_ms)
            submit[name].append(submit_ms)
        n = len(samples[order[0]])
        converged = n >= rule.min_samples and all(
            rel_se_of_median(s) <= rule.target_rel_se for s in samples.values())
        if converged or n >= rule.max_samples or _perf_counter() - started >= rule.time_cap:
            break
    return {name: summarize(samples[name], clock.method, wall[name], overhead, submit[name]) for name in entries}
