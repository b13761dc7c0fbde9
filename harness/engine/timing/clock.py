"""The per-call sampling of a timing: each call's fresh inputs, cache flush and clocks, in the process
that holds what is timed (the candidate's worker, the reference process), one batch of calls at a time.

Which calls a batch makes, on which seeds and in which order is the driver's (stages.py): here a
LocalParty runs one batch of its entries and says what each call measured.

On a GPU every call is timed on two clocks, one stage each (results.Clock):
  GPU time  the samples queued, as `triton.testing.do_bench` queues them: per sample the inputs,
            a device spin (Lead), a flush, a start event, the call, an end event, one synchronize per
            batch. The spin lasts longer than the host takes to queue the rest, as nvbench's blocking
            kernel holds the device until the host is done: so neither the host's launch time nor a
            clock that drops on an idle GPU lands in the window, however slow the host. A probed call
            (scrutiny.Scrutiny.probe_share) has its inputs flipped before the spin and restored after it, on the
            caller's stream (integrity/stream_order.py): work that does not wait for that stream
            reads the flipped values, and the re-check of its outputs says so.
  latency   a synchronize before each call and after it, as KernelBench's timer does:
            the start event, the call, an event on the caller's stream as it returns
            (latency ends there), a device-wide synchronize, a last event (every
            stream done: Clock.ALL_STREAMS). What runs between the caller's stream
            finishing and the device finishing, beyond an empty call's, is work on a
            stream the caller's does not wait for (`Timing.tail`); host time lands
            before the caller's event, never in that tail.
On a CPU each sample is perf_counter around the call (Clock.HOST).
"""
from __future__ import annotations

import contextlib
import os
import random
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional

import torch

from ...integrity.stream_order import decoy
from ...results import Clock, Timing, as_list
from ..processes.protocol import StopRule
from . import stages
from .stages import Batch, Call, Overhead

# Taken at import, before any candidate code runs in this process.
_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_sleep = getattr(torch.cuda, "_sleep", None)
_decoy = decoy


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
    # entered around each call, outside its window on the clock
    around: Callable[[], ContextManager] = contextlib.nullcontext
    warmups: Optional[int] = None  # calls before sampling; None: the rule's warmup_calls (RAN_HERE: it ran here)


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
    """Takes samples on one kind of device; on a CPU, perf_counter around each call."""

    method = "perf_counter"
    reset_persistence: Optional[Callable[[], int]] = None  # CUDA: persisting L2 lines go before each sample

    def __init__(self, device: torch.device):
        self.flush_buffer = torch.empty(flush_bytes(device), dtype=torch.uint8, device=device)

    def _flush(self) -> None:
        if self.reset_persistence:
            self.reset_persistence()
        self.flush_buffer.zero_()

    def queue(self, timed: Entry, seed: int, probe: bool = False, flush: bool = True) -> tuple[Any, float, Any]:
        """One sample: what `elapsed` reads once `drain` ran, the host's milliseconds until the call
        returned, and the call's output; without `flush`, a call checked and not timed. (`probe` means
        nothing on a CPU: its calls are in order.)"""
        args = timed.make_args(seed)
        if flush:
            self._flush()
        # The flush also evicts the interpreter's own path into the call; entering no_grad
        # once warms it, or ~30 us of those misses land on every sample.
        with torch.no_grad():
            pass
        with timed.around():
            t0 = _perf_counter()
            with torch.no_grad():
                output = timed.fn(*args)
            submit = (_perf_counter() - t0) * 1e3
        return submit, submit, output

    @staticmethod
    def elapsed(token: Any) -> float:
        return token

    def settle(self) -> None:
        """Before a batch: nothing to wait for on a CPU."""

    def drain(self) -> None:
        """After a batch: every queued sample readable."""

    def synchronous(self, timed: Entry, seed: int) -> tuple[float, float, float, Any]:
        raise NotImplementedError("a CPU has one clock")


class Lead:
    """How long the device spins before each queued sample's start event, per callable: longer than
    the host took to queue its recent samples (the spin, the flush, the start event, the call, the end
    event), so the device reaches the start event with the whole call already queued behind it."""

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


_RATE: list[float] = []  # spin_rate, once measured


def spin_rate() -> float:
    """The spin kernel's cycles per ms on this process's device, measured on first use (spin)."""
    if not _RATE:
        _RATE.append(_cycles_per_ms())
    return _RATE[0]


def spin(ms: float) -> None:
    """The device spins for `ms` on the current stream (a trial's stream-order probe, a traced call)."""
    if _sleep is not None:
        _sleep(int(ms * spin_rate()))


class CudaSampler(Sampler):
    """Queued samples between CUDA events on the caller's stream, and synchronous ones."""

    method = "cuda_events"

    def __init__(self, device: torch.device):
        super().__init__(device)
        self.reset_persistence = _l2_persistence_reset()
        self.lead = Lead()
        self.cycles_per_ms = _cycles_per_ms() if _sleep else 0.0

    def spin(self, ms: float) -> None:
        if self.cycles_per_ms:
            _sleep(int(ms * self.cycles_per_ms))

    def queue(self, timed: Entry, seed: int, probe: bool = False, flush: bool = True) -> tuple[Any, float, Any]:
        args = timed.make_args(seed)
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        with timed.around():
            began = _perf_counter()
            if probe:  # the inputs flipped until the spin ends (integrity/stream_order.py)
                _decoy(args)
            self.spin(self.lead.ms(timed.fn))
            if probe:
                _decoy(args)
            if flush:
                self._flush()  # after the restore, which brings the inputs into the cache
            start.record()
            t0 = _perf_counter()
            with torch.no_grad():
                output = timed.fn(*args)
            submit = (_perf_counter() - t0) * 1e3
            end.record()
            self.lead.saw(timed.fn, (_perf_counter() - began) * 1e3)
        return (start, end), submit, output

    @staticmethod
    def elapsed(token: Any) -> float:
        start, end = token
        return start.elapsed_time(end)

    def settle(self) -> None:
        """The device finishes what is queued; then a spin, so the batch's first call meets a busy
        device, as every other call does (an idle GPU lowers its clock)."""
        _synchronize()
        self.spin(BATCH_LEAD_MS)

    def drain(self) -> None:
        _synchronize()

    def synchronous(self, timed: Entry, seed: int) -> tuple[float, float, float, Any]:
        """One call with the device idle before it: its latency on the caller's stream, the tail
        until the whole device finished, the host's milliseconds until it returned, and its output."""
        args = timed.make_args(seed)
        self._flush()
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
        return start.elapsed_time(returned), returned.elapsed_time(finished), host, output


# The spin before a batch's first queued call (CudaSampler.settle).
BATCH_LEAD_MS = 0.5


def sampler_for(device: torch.device) -> Sampler:
    return CudaSampler(device) if device.type == "cuda" else Sampler(device)


_EMPTY = Entry(lambda seed: [], lambda: None)
EMPTY_CALLS = 10  # empty calls a stage's overhead is the median of
# A CPU's overhead, measured once a process: the protocol's, not the entries', and ten flushed empty calls
# take a quarter of a second there (a 128 MiB flush each), in every timing a reference process serves.
_CPU_OVERHEAD: Optional[Overhead] = None


def _storages(output: Any) -> list[tuple[int, int]]:
    """The byte ranges of the storages an output's tensors use."""
    found = []
    for value in as_list(output):
        if isinstance(value, torch.Tensor) and value.numel():
            storage = value.untyped_storage()
            found.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    return found


def shares_storage(output: Any, earlier: Any) -> bool:
    """Whether `output` uses memory of `earlier`, which its caller still holds."""
    before = _storages(earlier)
    return any(start < end_b and start_b < end for start, end in _storages(output) for start_b, end_b in before)


class LocalParty:
    """The entries of this process, sampled a batch at a time as the driver (stages.py) asks: warmed up
    before the first batch, each stage's overhead measured on its first. Each entry's previous output
    stays alive until its next call returns, so that a call handing back memory it handed out before
    shows (Batch.reused) rather than the allocator reusing freed blocks."""

    def __init__(self, entries: dict[str, Entry], device: torch.device, rule: StopRule,
                 sampler: Optional[Sampler] = None):
        self.timed, self.device, self.rule = entries, device, rule
        self.entries = list(entries)
        # Every timing process calls from one core, the same in each (the last of those they were given): two
        # processes taking turns then meet the same caches and the same share of the machine, where a core
        # each read copies of one model 0.5-1.2x apart on a 2-core machine.
        self.home = _affinity()
        if self.home:
            os.sched_setaffinity(0, {max(self.home)})
        self.sampler = sampler or sampler_for(device)
        self.stage: Optional[str] = None
        self.warm = False
        self.previous: dict[str, Any] = {}

    def _warm_up(self) -> None:
        rng = random.Random(urandom_seed())
        # A warm-up's cache flush matters only where the lead learns from it (a GPU, where it costs microseconds);
        # on a CPU each is ~13 ms of a 128 MiB buffer written, before calls that are not timed.
        flush = isinstance(self.sampler, CudaSampler)
        for timed in self.timed.values():
            warm = Entry(timed.make_args, timed.fn, around=timed.around)  # warm-ups are neither timed nor observed
            for _ in range(self.rule.warmup_calls if timed.warmups is None else timed.warmups):
                self.sampler.queue(warm, rng.getrandbits(63), flush=flush)
        self.sampler.drain()
        self.warm = True

    def _overhead(self, stage: str) -> Overhead:
        global _CPU_OVERHEAD
        sampler = self.sampler
        if not isinstance(sampler, CudaSampler):
            if _CPU_OVERHEAD is None:
                _CPU_OVERHEAD = self._queued_overhead()
            return _CPU_OVERHEAD
        if stage == Clock.LATENCY.value:
            empty = [sampler.synchronous(_EMPTY, 0) for _ in range(EMPTY_CALLS)]
            return Overhead(statistics.median(e[0] for e in empty), statistics.median(e[1] for e in empty),
                            statistics.median(e[0] + e[1] for e in empty))
        return self._queued_overhead()

    def _queued_overhead(self) -> Overhead:
        sampler = self.sampler
        sampler.settle()
        tokens = [sampler.queue(_EMPTY, 0)[0] for _ in range(EMPTY_CALLS)]
        sampler.drain()
        return Overhead(statistics.median(sampler.elapsed(t) for t in tokens))

    def _made(self, name: str, seed: int, output: Any, batch: Batch) -> None:
        """After a call: its output observed, checked against the entry's previous one, kept in its place."""
        timed = self.timed[name]
        if timed.observe:
            timed.observe(seed, output)
        if name in self.previous and shares_storage(output, self.previous[name]):
            batch.reused[name] = batch.reused.get(name, 0) + 1
        self.previous[name] = output

    def batch(self, stage: str, calls: list[Call], flush: bool = True) -> Batch:
        """Without `flush`: calls made as queued ones, checked and not timed (no cache flush before them)."""
        if not self.warm:
            self._warm_up()
        found = Batch(method=self.sampler.method)
        if stage != self.stage:
            found.overhead, self.stage = self._overhead(stage), stage
        sampler, rows = self.sampler, {name: [] for name in self.entries}
        if stage == Clock.LATENCY.value:
            for call in calls:
                latency, tail, host, output = sampler.synchronous(self.timed[call.entry], call.seed)
                self._made(call.entry, call.seed, output, found)
                rows[call.entry].append([latency, tail, host])
        else:
            sampler.settle()
            queued = []
            for call in calls:
                token, submit, output = sampler.queue(self.timed[call.entry], call.seed, call.probe, flush)
                self._made(call.entry, call.seed, output, found)
                queued.append((call.entry, token, submit))
            sampler.drain()
            for name, token, submit in queued:
                rows[name].append([sampler.elapsed(token), submit])
        found.rows = rows
        return found

    def close(self) -> None:
        self.previous.clear()
        if self.home:
            os.sched_setaffinity(0, self.home)


def _affinity() -> Optional[set[int]]:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None


def urandom_seed() -> int:
    return int.from_bytes(_urandom(8), "little")


_urandom = os.urandom


def time_interleaved(entries: dict[str, Entry], device: torch.device, rule: StopRule,
                     sampler: Optional[Sampler] = None) -> dict[str, dict[str, Timing]]:
    """Every entry of this process on every clock the device has (`rule.second_clock`), {clock: {entry:
    Timing}}, interleaved in random order (stages.run). The headline clock (`rule.clock`) samples first
    and gets the larger share of the cap."""
    party = LocalParty(entries, device, rule, sampler)
    try:
        return stages.run([party], rule, isinstance(party.sampler, CudaSampler)).clocked
    finally:
        party.close()
