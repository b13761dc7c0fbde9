"""The timing loop, its two clocks and its stopping rule.

Several callables (candidate, reference, optionally the compiled reference) are
timed interleaved in random order, so clock and thermal drift hit all of them
alike. Each sample gets fresh inputs (from a seed the caller may use to check the
output) and a cache flush.

On a GPU every callable is timed on two clocks, one stage each (results.Clock):
  GPU time  the samples queued, as `triton.testing.do_bench` queues them: per sample
            a flush, a start event, the call, an end event, one synchronize per batch.
            Before the start event the device spins (Lead) for longer than the host
            takes to queue the call, as nvbench's blocking kernel holds the device until
            the host is done: so neither the host's launch time nor a clock that drops
            on an idle GPU lands in the window, however slow the host (a reference's
            `around` or a busy core once put 0.01 ms of host time in one entry's windows
            and not in the other's).
  latency   a synchronize before each call and after it, as KernelBench's timer does:
            the start event, the call, an event on the caller's stream as it returns
            (latency ends there), a device-wide synchronize, a last event (every
            stream done: Clock.ALL_STREAMS). What runs between the caller's stream
            finishing and the device finishing, beyond an empty call's, is work on a
            stream the caller's does not wait for (`Timing.tail`); host time lands
            before the caller's event, never in that tail.
On a CPU each sample is perf_counter around the call (Clock.HOST).

A stage stops when its stopping criterion (../stopping.py, `--stop`) is met after its fewest
samples, or at its share of the cap; each Timing says which (Timing.ended).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional

import torch

from ...results import Clock, Ended, Timing
from ...stats import summarize
from .. import stopping
from ..processes.protocol import StopRule

# Taken at import, before any candidate code runs in this process.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_sleep = getattr(torch.cuda, "_sleep", None)
_open = open


# The headline clock's stage takes this share of the time cap, the other clock's the rest.
HEADLINE_SHARE = 0.65
# ...and is reported beside the headline, never divided by it: it stops at a threshold this many
# times coarser, after fewer samples (StopRule.fewer_samples).
SECOND_COARSER = 2.0


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
    """cudaCtxResetPersistingL2Cache, if the runtime is there. Lines a kernel marked persisting survive
    an ordinary flush; resetting them before each sample keeps a candidate from carrying its data across calls."""
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


# Warm-up calls of an entry whose process has run its kernels at this shape already: the candidate after
# its trials, the reference alone after its load, trials and re-check, a twin after the reference's entry
# (one call places the twin's own tensors). A reference fresh in the candidate's worker, or compiled
# (torch.compile compiles in its first calls), takes the rule's warm-ups.
RAN_HERE = 1


@dataclass
class Entry:
    """One callable that time_interleaved times beside the others (protocol.Timed is the reply)."""

    make_args: Callable[[int], list]  # fresh inputs for one call, from a seed
    fn: Callable
    observe: Optional[Callable[[int, Any], None]] = None  # sees (seed, output) of each timed call
    # entered around each call, outside its window on the clock (guards.BackendSwitches.as_taken)
    around: Callable[[], ContextManager] = contextlib.nullcontext
    warmups: Optional[int] = None  # calls before sampling; None: the rule's warmup_calls (RAN_HERE: it ran here)


def _runqueue_wait_ms() -> float:
    """How long this thread has waited for a CPU while runnable (/proc's schedstat), in ms: the
    time other processes' load took from it; 0 where the kernel does not say."""
    try:
        with _open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


def _cpu_cache_bytes() -> int:
    try:
        text = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()  # "32768K" or "32M"
        return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text.rstrip("M")) << 20
    except (OSError, ValueError):
        return 32 << 20


# A CPU's flush at most this: a guest may report its host's whole L3 (480 MiB on 2 cores), and twice
# that before every sample made a sample about 0.1 s and each timing process a gigabyte larger.
CPU_FLUSH_MAX_BYTES = 128 << 20


def flush_bytes(device: torch.device) -> int:
    """The cache-flush buffer's bytes on `device`: twice its last-level cache (a GPU's L2, at least
    64 MB; a CPU's L3, at most CPU_FLUSH_MAX_BYTES). The one owner of that size: the fit estimate
    counts what the reference process reports from here (ReferenceReady.flush_bytes)."""
    if device.type == "cuda":
        return max(2 * torch.cuda.get_device_properties(device).L2_cache_size, 64 << 20)
    return min(2 * _cpu_cache_bytes(), CPU_FLUSH_MAX_BYTES)


class Sampler:
    """Takes samples on one kind of device; `stages` names its clocks, the headline's first."""

    method = "perf_counter"
    reset_persistence: Optional[Callable[[], int]] = None  # CUDA: persisting L2 lines go before each sample

    def __init__(self, device: torch.device):
        self.flush_buffer = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device)

    def stages(self, headline: str) -> list[str]:
        return [Clock.HOST.value]

    def _prepare(self, timed: Entry, seed: int) -> list:
        args = timed.make_args(seed)
        if self.reset_persistence:
            self.reset_persistence()
        self.flush_buffer.zero_()
        return args

    def queue(self, timed: Entry, seed: int) -> tuple[Any, float]:
        """One sample; returns what `elapsed` reads once `drain` ran, and the host's
        milliseconds until the call returned."""
        args = self._prepare(timed, seed)
        # The flush also evicts the interpreter's own path into the call; entering no_grad
        # once warms it, or ~30 us of those misses land on every sample.
        with torch.no_grad():
            pass
        with timed.around():
            waited = _runqueue_wait_ms()
            t0 = _perf_counter()
            with torch.no_grad():
                output = timed.fn(*args)
            submit = (_perf_counter() - t0) * 1e3
            waited = _runqueue_wait_ms() - waited
        if timed.observe:
            timed.observe(seed, output)
        return (submit, max(submit - waited, 0.0)), submit

    @staticmethod
    def elapsed(token: Any) -> float:
        return token[0]

    @staticmethod
    def unloaded(token: Any) -> Optional[float]:
        """The sample less its thread's wait for a CPU (None on a clock that does not know it)."""
        return token[1]

    def settle(self) -> None:
        """Before a batch: nothing to wait for on a CPU."""

    def drain(self) -> None:
        """After a batch: every queued sample readable."""

    def synchronous(self, timed: Entry, seed: int) -> tuple[float, float, float]:
        raise NotImplementedError("a CPU has one clock")


class Lead:
    """How long the device spins before each queued sample's start event, per callable: longer than
    the host took to queue its recent samples (the spin, the start event, the call, the end event),
    so the device reaches the start event with the whole call already queued behind it."""

    MARGIN = 1.25
    MIN_MS = 0.02
    # A call that waits for the device (a synchronize inside) also waits for the spin: the lead would
    # grow without end. Past this the host's part stays in such a call's window, as it must.
    MAX_MS = 2.0
    RECENT = 8  # samples remembered: a slow first call stops setting the lead after this many

    def __init__(self):
        self.recent: dict[int, deque] = {}

    def ms(self, fn: Callable) -> float:
        seen = self.recent.get(id(fn))
        return min(self.MAX_MS, self.MARGIN * max(seen) + self.MIN_MS) if seen else self.MIN_MS

    def saw(self, fn: Callable, queued_ms: float) -> None:
        self.recent.setdefault(id(fn), deque(maxlen=self.RECENT)).append(queued_ms)


def _cycles_per_ms() -> float:
    """The spin kernel's clock cycles per millisecond, at the faster of two tries (a clock that
    is still rising reads fewer cycles a millisecond: the spin then runs longer, never shorter)."""
    cycles, found = 2_000_000, 0.0
    for _ in range(2):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        start.record()
        _sleep(cycles)
        end.record()
        end.synchronize()
        found = max(found, cycles / max(start.elapsed_time(end), 1e-6))
    return found


class CudaSampler(Sampler):
    """Queued samples between CUDA events on the caller's stream, and synchronous ones."""

    method = "cuda_events"

    def __init__(self, device: torch.device):
        super().__init__(device)
        self.reset_persistence = _l2_persistence_reset()
        self.lead = Lead()
        self.cycles_per_ms = _cycles_per_ms() if _sleep else 0.0

    def stages(self, headline: str) -> list[str]:
        both = [Clock.GPU.value, Clock.LATENCY.value]
        return both if headline != Clock.LATENCY.value else both[::-1]

    def queue(self, timed: Entry, seed: int) -> tuple[Any, float]:
        args = self._prepare(timed, seed)
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        with timed.around():
            began = _perf_counter()
            if self.cycles_per_ms:
                _sleep(int(self.lead.ms(timed.fn) * self.cycles_per_ms))
            start.record()
            t0 = _perf_counter()
            with torch.no_grad():
                output = timed.fn(*args)
            submit = (_perf_counter() - t0) * 1e3
            end.record()
            self.lead.saw(timed.fn, (_perf_counter() - began) * 1e3)
        if timed.observe:
            timed.observe(seed, output)
        return (start, end), submit

    @staticmethod
    def elapsed(token: Any) -> float:
        start, end = token
        return start.elapsed_time(end)

    @staticmethod
    def unloaded(token: Any) -> Optional[float]:
        return None

    def settle(self) -> None:
        """The device finishes what is queued (each sample's lead keeps it from idling in a window)."""
        _synchronize()

    def drain(self) -> None:
        _synchronize()

    def synchronous(self, timed: Entry, seed: int) -> tuple[float, float, float]:
        """One call with the device idle before it: (its latency on the caller's stream, the tail
        until the whole device finished, the host's milliseconds until it returned)."""
        args = self._prepare(timed, seed)
        _synchronize()
        start, returned, finished = (_Event(enable_timing=True) for _ in range(3))
        with timed.around():
            start.record()
            t0 = _perf_counter()
            with torch.no_grad():
                output = timed.fn(*args)
            host = (_perf_counter() - t0) * 1e3
            returned.record()  # runs once the caller's stream has done everything queued before it
            _synchronize()
            finished.record()  # recorded once every stream on the device is done
        finished.synchronize()
        if timed.observe:
            timed.observe(seed, output)
        return start.elapsed_time(returned), returned.elapsed_time(finished), host


def sampler_for(device: torch.device) -> Sampler:
    return CudaSampler(device) if device.type == "cuda" else Sampler(device)


_EMPTY = Entry(lambda seed: [], lambda: None)


def _ended(samples: dict[str, list[float]], rule: StopRule, started: float, cap: float) -> Optional[Ended]:
    """Why the stage stops now, if it does: its criterion met after the fewest samples, else a cap."""
    n = min(len(s) for s in samples.values())
    if n >= rule.min_samples and stopping.criterion(rule.criterion).met(samples, rule.target):
        return Ended.MET
    if n >= rule.max_samples:
        return Ended.SAMPLE_CAP
    if _perf_counter() - started >= cap:
        return Ended.TIME_CAP
    return None


def _queued(sampler: Sampler, entries: dict[str, Entry], rule: StopRule, cap: float, rng: random.Random,
            clock: str) -> dict[str, Timing]:
    """Samples queued in batches, each callable once a round in random order, until the medians settle."""
    sampler.settle()
    tokens = [sampler.queue(_EMPTY, 0)[0] for _ in range(10)]
    sampler.drain()
    overhead = statistics.median(sampler.elapsed(t) for t in tokens)
    samples: dict[str, list[float]] = {name: [] for name in entries}
    unloaded: dict[str, list[float]] = {name: [] for name in entries}
    submit: dict[str, list[float]] = {name: [] for name in entries}
    order = list(entries)
    started = _perf_counter()
    rounds = 5
    while True:
        sampler.settle()
        batch_started = _perf_counter()
        queued: dict[str, list] = {name: [] for name in entries}
        for _ in range(rounds):
            rng.shuffle(order)
            for name in order:
                token, submit_ms = sampler.queue(entries[name], rng.getrandbits(63))
                queued[name].append(token)
                submit[name].append(submit_ms)
        sampler.drain()
        for name, tokens in queued.items():
            samples[name].extend(sampler.elapsed(t) for t in tokens)
            unloaded[name].extend(u for u in map(sampler.unloaded, tokens) if u is not None)
        n = len(samples[order[0]])
        ended = _ended(samples, rule, started, cap)
        if ended:
            break
        # batches of about 0.2 s, so the device runs long stretches without waiting on the host; short
        # of the fewest samples, what reaches them (a criterion met there ends the stage there)
        per_round = (_perf_counter() - batch_started) / rounds
        short = rule.min_samples - n if n < rule.min_samples else 200
        rounds = max(1, min(rule.max_samples - n, int(0.2 / max(per_round, 1e-6)), 200, short))
    found = {name: summarize(samples[name], sampler.method, submit[name], overhead, clock=clock, ended=ended.value)
             for name in entries}
    for name, each in unloaded.items():
        if each:
            found[name].unloaded_median = statistics.median(each)
    return found


def _synchronous(sampler: Sampler, entries: dict[str, Entry], rule: StopRule, cap: float,
                 rng: random.Random) -> dict[str, dict[str, Timing]]:
    """Samples one call at a time, the device idle before each: the latency and every-stream clocks."""
    empty = [sampler.synchronous(_EMPTY, 0) for _ in range(10)]
    overhead = statistics.median(latency for latency, _, _ in empty)
    tail_overhead = statistics.median(tail for _, tail, _ in empty)
    whole_overhead = statistics.median(latency + tail for latency, tail, _ in empty)
    taken: dict[str, list[tuple[float, float, float]]] = {name: [] for name in entries}
    order = list(entries)
    started = _perf_counter()
    while True:
        for _ in range(5):
            rng.shuffle(order)
            for name in order:
                taken[name].append(sampler.synchronous(entries[name], rng.getrandbits(63)))
        latencies = {name: [latency for latency, _, _ in s] for name, s in taken.items()}
        ended = _ended(latencies, rule, started, cap)
        if ended:
            break
    found: dict[str, dict[str, Timing]] = {Clock.LATENCY.value: {}, Clock.ALL_STREAMS.value: {}}
    for name, s in taken.items():
        host = [h for _, _, h in s]
        tails = [tail for _, tail, _ in s]
        latency = summarize([latency for latency, _, _ in s], sampler.method, host, overhead,
                            clock=Clock.LATENCY.value, ended=ended.value)
        latency.tail, latency.tail_overhead = statistics.median(tails), tail_overhead
        found[Clock.LATENCY.value][name] = latency
        found[Clock.ALL_STREAMS.value][name] = summarize([latency + tail for latency, tail, _ in s], sampler.method,
                                                         host, whole_overhead, clock=Clock.ALL_STREAMS.value,
                                                         ended=ended.value)
    return found


def time_interleaved(entries: dict[str, Entry], device: torch.device, rule: StopRule,
                     sampler: Optional[Sampler] = None) -> dict[str, dict[str, Timing]]:
    """Every entry on every clock the device has (`rule.second_clock`), {clock: {entry: Timing}}. The
    headline clock (`rule.clock`) samples first and gets the larger share of the cap."""
    rng = random.Random(os.urandom(16))
    sampler = sampler or sampler_for(device)
    for timed in entries.values():
        warm = Entry(timed.make_args, timed.fn, around=timed.around)  # warm-ups are neither timed nor observed
        for _ in range(rule.warmup_calls if timed.warmups is None else timed.warmups):
            sampler.queue(warm, rng.getrandbits(63))
    sampler.drain()
    stages = sampler.stages(rule.clock)
    shares = [1.0] if len(stages) == 1 else [HEADLINE_SHARE, 1 - HEADLINE_SHARE]
    found: dict[str, dict[str, Timing]] = {}
    for i, clock in enumerate(stages if rule.second_clock else stages[:1]):
        cap = rule.time_cap * shares[i]
        if i:  # reported beside the headline, never divided by it: a coarser interval does
            rule = dataclasses.replace(rule, target=rule.target * SECOND_COARSER, min_samples=rule.fewer_samples())
        if clock == Clock.LATENCY.value:
            found.update(_synchronous(sampler, entries, rule, cap, rng))
        else:
            found[clock] = _queued(sampler, entries, rule, cap, rng, clock)
    return found


def trace_calls(timed: Entry, calls: int = 3) -> list[dict]:
    """A few calls under the torch profiler, each between two marker kernels on the caller's stream
    (torch_trace.late_streams reads which other streams outlasted it): the Kineto trace's events."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    seeds = [random.getrandbits(63) for _ in range(calls)]
    args = [timed.make_args(seed) for seed in seeds]
    _synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for each in args:
            _sleep(1000)
            with torch.no_grad():
                timed.fn(*each)
            _sleep(1000)
            _synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        return json.load(open(f.name)).get("traceEvents", [])
