"""The timing loop and its stopping rule.

Several callables (candidate, reference, optionally the compiled reference) are
timed interleaved in random order, so clock and thermal drift hit all of them
alike. Each sample gets fresh inputs (from a seed the caller may use to check the
output) and a cache flush.

On a GPU the samples are queued, as `triton.testing.do_bench` queues them: per
sample a flush, a start event, the call, an end event, and one synchronize per
batch. The GPU never idles while the host launches, so neither the host's launch
time nor a clock that drops on an idle GPU lands in the window. Queued events see
only the current stream, so a few synchronous samples follow (device-wide
synchronize before the end event): work a candidate hides on another stream or
thread shows up as a synchronous time well above the queued one, and the caller
then takes the synchronous figures (`Timing.hidden_work`).

On a CPU each sample is timed with perf_counter around the call.

Sampling stops when the relative standard error of every median is under the
target, or at a cap.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..results import Timing
from ..stats import rel_se_of_median, summarize
from .protocol import StopRule

# Taken at import, before any candidate code runs in this process.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_sleep = getattr(torch.cuda, "_sleep", None)


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
class Entry:
    """One callable that time_interleaved times beside the others (protocol.Timed is the reply)."""

    make_args: Callable[[int], list]  # fresh inputs for one call, from a seed
    fn: Callable
    observe: Optional[Callable[[int, Any], None]] = None  # sees (seed, output) of each timed call


def _cpu_cache_bytes() -> int:
    try:
        text = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
        return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text.rstrip("M")) << 20
    except (OSError, ValueError):
        return 32 << 20


def flush_bytes(device: torch.device) -> int:
    """The cache-flush buffer's bytes on `device`: twice its last-level cache (a GPU's L2, at least
    64 MB; a CPU's L3). The one owner of that size: the fit estimate counts what the reference
    process reports from here (ReferenceReady.flush_bytes)."""
    if device.type == "cuda":
        return max(2 * torch.cuda.get_device_properties(device).L2_cache_size, 64 << 20)
    return 2 * _cpu_cache_bytes()


class Clock:
    """Times calls: queued between CUDA events (GPU), or by perf_counter (CPU)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.reset_persistence = None
        self.flush_buffer = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device)
        if self.cuda:
            self.reset_persistence = _l2_persistence_reset()
            self.method = "cuda_events"
        else:
            self.method = "perf_counter"

    def _prepare(self, timed: Entry, seed: int) -> list:
        args = timed.make_args(seed)
        if self.reset_persistence:
            self.reset_persistence()
        self.flush_buffer.zero_()
        return args

    def queue(self, timed: Entry, seed: int) -> tuple[Any, float]:
        """Queue one sample; returns what `elapsed` reads once the device is synchronized,
        and the host's milliseconds until the call returned."""
        args = self._prepare(timed, seed)
        if not self.cuda:
            # On a CPU the flush also evicts the interpreter's own path into the call; entering
            # no_grad once warms it, or ~30 us of those misses land on every sample.
            with torch.no_grad():
                pass
        start = _Event(enable_timing=True) if self.cuda else None
        if start:
            start.record()
        t0 = _perf_counter()
        with torch.no_grad():
            output = timed.fn(*args)
        returned = _perf_counter()
        end = None
        if self.cuda:
            end = _Event(enable_timing=True)
            end.record()
        if timed.observe:
            timed.observe(seed, output)
        submit = (returned - t0) * 1e3
        return ((start, end) if self.cuda else submit), submit

    def synchronous(self, timed: Entry, seed: int) -> float:
        """One GPU sample that waits for the whole device before its end: every stream counts."""
        args = self._prepare(timed, seed)
        _synchronize()
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        start.record()
        with torch.no_grad():
            output = timed.fn(*args)
        _synchronize()
        end.record()
        end.synchronize()
        if timed.observe:
            timed.observe(seed, output)
        return start.elapsed_time(end)

    def settle(self) -> None:
        """Before a batch: the device finishes what is queued, then gets a short spin to
        run while the host queues the batch, so the first sample does not start on an idle GPU."""
        if self.cuda:
            _synchronize()
            if _sleep:
                _sleep(200_000)  # ~0.1 ms at Hopper clocks

    @staticmethod
    def elapsed(token: Any) -> float:
        if isinstance(token, tuple):
            start, end = token
            return start.elapsed_time(end)
        return token


def time_interleaved(entries: dict[str, Entry], device: torch.device, rule: StopRule) -> dict[str, Timing]:
    rng = random.Random(os.urandom(16))
    clock = Clock(device)
    for timed in entries.values():
        warm = Entry(timed.make_args, timed.fn)  # warm-up calls are neither timed nor observed
        for _ in range(rule.warmup_calls):
            clock.queue(warm, rng.getrandbits(63))
    empty = Entry(lambda seed: [], lambda: None)
    clock.settle()
    tokens = [clock.queue(empty, 0)[0] for _ in range(10)]
    if clock.cuda:
        _synchronize()
    overhead = statistics.median(clock.elapsed(t) for t in tokens)
    samples: dict[str, list[float]] = {name: [] for name in entries}
    submit: dict[str, list[float]] = {name: [] for name in entries}
    order = list(entries)
    started = _perf_counter()
    rounds = 5
    while True:
        clock.settle()
        batch_started = _perf_counter()
        queued = {name: [] for name in entries}
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                token, submit_ms = clock.queue(entries[name], rng.getrandbits(63))
                queued[name].append(token)
                submit[name].append(submit_ms)
        if clock.cuda:
            _synchronize()
        for name, tokens in queued.items():
            samples[name].extend(clock.elapsed(t) for t in tokens)
        n = len(samples[order[0]])
        converged = n >= rule.min_samples and all(
            rel_se_of_median(s) <= rule.target_rel_se for s in samples.values())
        elapsed = _perf_counter() - started
        if converged or n >= rule.max_samples or elapsed >= rule.time_cap:
            break
        # batches of about 0.2 s, so the device runs long stretches without waiting on the host
        per_round = (_perf_counter() - batch_started) / rounds
        rounds = max(1, min(rule.max_samples - n, int(0.2 / max(per_round, 1e-6)), 200))
    synchronous: dict[str, list[float]] = {name: [] for name in entries}
    if clock.cuda:
        for _ in range(rule.sync_samples):
            rng.shuffle(order)
            for name in order:
                synchronous[name].append(clock.synchronous(entries[name], rng.getrandbits(63)))
    return {name: summarize(samples[name], clock.method, submit[name], overhead, synchronous[name])
            for name in entries}
