"""The candidate role: the one process that runs candidate code.

It imports the built candidate, runs it on the inputs it is handed (the reference process
compares the outputs), and times it in batches of calls the harness draws, taking turns with
the reference process, which times the reference (workers/party.py), sampling every timed
output for the reference process to re-check. Every reply carries what the runtime guards saw.
After the import it serves the harness's requests, one handler each (HANDLERS).
"""
from __future__ import annotations

import gc
import os
import random
import time
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable, Optional

import torch

from ...files import new_seed
from ...integrity import digest as digests
from ...integrity import guards
from ...integrity.guards import (BackendSwitches, DispatchWatch, Guard, L2Watch, SubreaperWatch, ThreadWatch,
                                findings)
from ...integrity.recheck import TimedOutputs
from ...integrity.stream_order import decoy, trial_spin_ms
from ...problem import Shapes
from ...results import from_dict, to_dict
from ..checking import compare
from ..processes import channel
from ..processes.cores import take_own_cores
from ..processes.protocol import (CANDIDATE_PROCESS_REFERENCE, CandidateReady, CandidateSpec, Command, PartyReady,
                                  Reply, Request, ShapeSet, StreamsTraced, Timed, TrialOutputs)
from ..profiling import torch_trace
from ..timing import clock, stages, trace
from . import backward, party
from .graph import CapturedForward, NotCapturable
from .common import (SameTensors, State, build_model, classify_import_error, copy_parameters, error_message,
                     import_candidate, import_file, in_mode, inputs_from_seed, reference_from, settle, sync)
from .memory import Parking, free_cache, memory_use

# Every callable the harness relies on here, the engine's own modules included, as
# they were before candidate code ran. The labels keep the short names verdicts have
# always used: "harness.timing" is harness/engine/timing/clock.py, and so on.
GUARD = Guard()
for _label, _namespace in (("torch", torch), ("torch.nn.functional", torch.nn.functional),
                           ("torch.Tensor", torch.Tensor), ("torch.cuda", torch.cuda),
                           ("torch.cuda.Event", torch.cuda.Event), ("time", clock.time),
                           ("torch.profiler", torch.profiler), ("harness.timing", clock),
                           ("harness.timing.Sampler", clock.Sampler), ("harness.timing.CudaSampler", clock.CudaSampler),
                           ("harness.timing.LocalParty", clock.LocalParty), ("harness.stages", stages),
                           ("harness.trace", trace),
                           ("harness.party", party),
                           ("harness.torch_trace", torch_trace),
                           ("harness.channel", channel), ("harness.compare", compare),
                           ("harness.guards", guards), ("harness.digest", digests),
                           ("torch.autograd", torch.autograd), ("harness.backward", backward),
                           # drawing a timed call's inputs seeds `random`; the re-check's keys come from os.urandom
                           ("random", random), ("random.Random", random.Random), ("os", os)):
    GUARD.take(_label, _namespace)
# the functions this module calls after candidate code has run, kept unswappable
_send, _start, _batch, _end = channel.send, party.start, party.batch, party.end
_digest, _totals, _changed, _memory_use = digests.digest, digests.totals, digests.changed, memory_use
_free_cache, _SameTensors, _decoy, _spin_ms, _spin = free_cache, SameTensors, decoy, trial_spin_ms, clock.spin
_shares_storage, _perf_counter = clock.shares_storage, time.perf_counter
_trial, _timed_training, _output_metas = backward.trial, backward.timed, backward.output_metas
_trace_calls, _outside_windows = trace.trace_calls, torch_trace.outside_windows
# taken at import, before the candidate's code can replace them
_set_memory_fraction, _memory_stats = torch.cuda.set_per_process_memory_fraction, torch.cuda.memory_stats
_device_properties, _current_device = torch.cuda.get_device_properties, torch.cuda.current_device


@dataclass
class CandidateWorker:
    """What the candidate's worker keeps between requests: its model at the current shape, the
    runtime guards' watchers, the CUDA graph while it is checked, the outputs it shares, and a timing's
    party between its batches."""

    conn: channel.Channel
    spec: CandidateSpec
    device: torch.device
    problem: ModuleType
    model_new: type
    watch: ThreadWatch
    switches: BackendSwitches  # as the harness set them: what the candidate flipped is reported
    l2: L2Watch
    dispatch: DispatchWatch
    subreaper: SubreaperWatch
    shapes: Shapes
    candidate: Optional[torch.nn.Module] = None
    state: Optional[State] = None
    matched: Optional[list] = None
    metas: Optional[list] = None  # --backward: the reference's outputs that get an upstream gradient
    reference: Optional[torch.nn.Module] = None  # on a CPU, timed here too (CANDIDATE_PROCESS_REFERENCE)
    graph: Optional["CapturedForward"] = None
    # outputs the reference process maps (CUDA IPC): alive until it has answered
    shared: list = field(default_factory=list)
    # the last trial's outputs, kept through the next trial's call: a new output sharing their memory is one
    # the candidate handed out before (an output that changes under a caller who kept it)
    kept: list = field(default_factory=list)
    timing: Optional[party.Kept] = None
    host_ms: float = 0.0  # the host time of the last trial's call: the next probed trial's spin (stream_order)

    def build(self) -> list[str]:
        """ModelNew built afresh at the current shape (build_pair); the warnings of copying the parameters."""
        self.candidate, warnings, self.matched, self.metas, self.reference = build_pair(
            self.problem, self.model_new, self.spec, self.device)
        self.state = State(self.candidate)
        return warnings

    def guards(self) -> dict[str, list[str]]:
        return findings(GUARD, self.watch, self.l2, self.dispatch, self.subreaper)

    def entries(self, observed: Optional[TimedOutputs]) -> dict[str, clock.Entry]:
        """What this worker times: the candidate (under --backward, forward and backward as one call, and
        its forward alone beside it, shown only); on a CPU the reference too, its outputs sampled alike and
        dropped (CANDIDATE_PROCESS_REFERENCE)."""
        problem, device, candidate, reference = self.problem, self.device, self.candidate, self.reference
        if not self.spec.backward:
            found = {"candidate": clock.Entry(_SameTensors(problem, device), candidate, party.observer(observed),
                                              warmups=clock.RAN_HERE)}
            if reference is not None:
                found[CANDIDATE_PROCESS_REFERENCE] = clock.Entry(_SameTensors(problem, device), reference,
                                                                 party.observer(TimedOutputs(device)))
            return found
        training = _timed_training(_SameTensors(problem, device), candidate, self.matched, self.metas, device,
                                   party.observer(observed))
        found = {"candidate": replace(training, warmups=clock.RAN_HERE),
                 "candidate_forward": clock.Entry(_SameTensors(problem, device), candidate, warmups=clock.RAN_HERE)}
        if reference is not None:
            found[CANDIDATE_PROCESS_REFERENCE] = _timed_training(
                _SameTensors(problem, device), reference, backward.own_parameters(reference), self.metas, device,
                party.observer(TimedOutputs(device)))
        return found


def candidate_role(conn, header: dict) -> None:
    spec = from_dict(CandidateSpec, header)
    os.environ.update(spec.env)  # this candidate's cache entry; the process may be a spare
    device = torch.device(spec.device)
    settle(device)
    problem = import_file(spec.problem, "problem")
    GUARD.take("problem", problem)
    GUARD.take("problem.Model", problem.Model)
    for cls in vars(torch.nn).values():
        # nn.Module itself is left out: torch.compile wraps its __init__ for its own bookkeeping
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and cls is not torch.nn.Module:
            GUARD.take(f"torch.nn.{cls.__name__}", cls)
    watch = ThreadWatch()  # before the import: a thread started there may finish work later too
    switches, l2, dispatch = BackendSwitches(), L2Watch(device, clock.l2_persistence), DispatchWatch()
    subreaper = SubreaperWatch()  # launch.confine made this process the subreaper of what it starts
    try:
        module = import_candidate(spec)
    except BaseException as exc:  # noqa: BLE001
        channel.send(conn, error_message(classify_import_error(exc), exc))
        return
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type) or not issubclass(model_new, torch.nn.Module):
        channel.send(conn, to_dict(Reply(error="import_error",
                                         message="the file defines no ModelNew subclass of torch.nn.Module")))
        return
    dispatch.full()  # what its extension registered as it was loaded
    worker = CandidateWorker(conn, spec, device, problem, model_new, watch, switches, l2, dispatch, subreaper,
                             Shapes(problem))
    try:
        warnings = _build_within(worker, spec.beside_cap)
        at_turn = warnings is None
        if at_turn:
            if not _turn(conn):
                return
            warnings = worker.build()
        # the digests' and their comparison's first launches (30-50 ms each on an H200) made here, ahead of
        # the check where this worker was staged: on eight numbers, kernels as small as the build's own
        small = _digest([torch.zeros(8, device=device)])
        _totals(small)
        _changed(small, small)
    except BaseException as exc:  # noqa: BLE001
        channel.send(conn, error_message("runtime_error", exc, phase="constructing ModelNew"))
        return
    channel.send(conn, to_dict(CandidateReady(ready=True, warnings=warnings, guards=worker.guards(),
                                              built_at_turn=at_turn)))
    if spec.beside_cap and not at_turn and not _turn(conn):
        return
    _serve(worker)


def _build_within(worker: CandidateWorker, cap: int) -> Optional[list[str]]:
    """worker.build() (its warnings) where its models take at most `cap` bytes of the device's memory
    (0: no limit; a staged worker beside another problem's evaluation must not run that one out of
    memory); None where they would take more, none of them left: they are built at the candidate's
    turn. An out-of-memory error the candidate's own __init__ caught counts too (the allocator counts
    each): a model built around one is not the one its turn would build."""
    device = worker.device
    if not cap or device.type != "cuda":
        return worker.build()
    index = _current_device() if device.index is None else device.index  # the fraction takes an index alone

    def ooms() -> int:  # the allocator's count of allocations it refused
        return _memory_stats(index).get("num_ooms", 0)

    before = ooms()
    _set_memory_fraction(min(1.0, cap / _device_properties(index).total_memory), index)
    try:
        warnings = worker.build()
    except Exception:
        warnings = None
        if ooms() == before:
            raise
    finally:
        _set_memory_fraction(1.0, index)
    if ooms() == before:
        return warnings
    worker.reference = worker.candidate = worker.state = worker.matched = worker.metas = None
    gc.collect()  # what a failed build left in its traceback's frames
    _free_cache(device)
    return None


def _turn(conn) -> bool:
    """Waits for the harness to say the candidate's turn came (TURN); False where it said EXIT instead."""
    turn = from_dict(Request, channel.recv(conn).header).cmd is Command.TURN
    take_own_cores()  # a staged worker's (CandidateSpec.staged)
    return turn


# --- the requests: each handler answers one, and says whether the process goes on ---------------

def release(worker: CandidateWorker, request: Request) -> bool:
    """The reference process has compared what it mapped: the device is the reference process's."""
    _send(worker.conn, to_dict(Reply(memory=_memory_use(worker.device))))
    return True


def set_shape(worker: CandidateWorker, request: Request) -> bool:
    """ModelNew (and on a CPU the reference) rebuilt at another shape ({} the main one)."""
    # the old shape's models go first: the device never holds them beside the new ones
    worker.reference = worker.candidate = worker.state = worker.matched = worker.metas = None
    _free_cache(worker.device)
    try:
        worker.shapes.set(request.shape or {})
        worker.build()
    except BaseException as exc:  # noqa: BLE001
        # at another shape a failure is that shape's verdict: the process goes on to the next
        channel.send(worker.conn, error_message("runtime_error", exc, phase="constructing ModelNew at the shape"))
        return True
    _free_cache(worker.device)  # what building left cached goes back, for the reference process's next trial
    _send(worker.conn, to_dict(ShapeSet(applied=True)))
    return True


def replay_graph(worker: CandidateWorker, request: Request) -> bool:
    """Forward captured in a CUDA graph on the first request's inputs, replayed on this one's."""
    device = worker.device
    inputs = inputs_from_seed(worker.problem, device, request.seed)
    try:
        if worker.graph is None:
            worker.graph = CapturedForward(worker.candidate, inputs)
        outputs = worker.graph.replay(inputs)
        digest = _totals(_digest(inputs))
        tensors: list = []
        tree = channel.flatten(outputs, tensors)
        # the reference process copies the outputs in next: the inputs need not sit beside them
        if request.last:
            del inputs
            worker.graph.drop_inputs()
            _free_cache(device)
        read = _totals(_digest(tensors))
    except NotCapturable as exc:
        _send(worker.conn, to_dict(TrialOutputs(not_capturable=str(exc), guards=worker.guards())))
        return True
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase="replaying the CUDA graph"))
        return False
    worker.shared = _send(worker.conn, to_dict(TrialOutputs(outputs=tree, checksum=digest, read_sums=read,
                                                            guards=worker.guards())), tensors, share_gpu=True)
    return True


def run_trial(worker: CandidateWorker, request: Request) -> bool:
    """ModelNew on the inputs of the trial's seed (forward and backward under --backward); its outputs
    shared with the reference process, whether it changed its inputs, and on a GPU where the request
    asks, PyTorch's stream order probed (integrity/stream_order.py): the inputs made on the caller's
    stream behind a spin, and the outputs read on it as the call returns, before the device is
    synchronized. Whether its outputs share memory with the last trial's, which this process still
    holds, is said too."""
    device, spec = worker.device, worker.spec
    phase = "drawing the trial's inputs"
    previous, worker.kept = worker.kept, []
    try:  # inside the try: running out of memory here is still this candidate's run
        worker.state.restore()
        inputs = inputs_from_seed(worker.problem, device, request.seed, request.distribution)
        # taken before the candidate sees them: block sums, not a second copy of the inputs
        before = _digest(inputs)
        digest = _totals(before)
        phase = "running ModelNew" + (" forward and backward" if spec.backward else "")
        lifted: list[int] = []
        probe = request.probe and device.type == "cuda" and not spec.backward
        if spec.backward:
            outputs, lifted = _trial(backward.Training(worker.candidate, worker.matched), inputs, request.seed,
                                     device, _digest, _changed)
        else:
            if probe:
                _decoy(inputs)
                sync(device)  # flipped, everywhere, before the spin
                _spin(_spin_ms(worker.host_ms))
                _decoy(inputs)  # restored on the caller's stream once the spin is over
            started = _perf_counter()
            with torch.no_grad():
                outputs = worker.candidate(*inputs)
            worker.host_ms = (_perf_counter() - started) * 1e3
        tensors: list = []
        tree = channel.flatten(outputs, tensors)
        at_return = _digest(tensors) if probe else None  # queued on the caller's stream as it returned
        sync(device)
        changed = _changed(before, _digest(inputs))
        del inputs, before
        read = _totals(_digest(tensors))  # what the reference process must read of them
        not_ready = at_return is not None and _totals(at_return) != read
        reused = _shares_storage(tensors, previous)
        del previous
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase=phase))
        return bool(worker.shapes.main)  # at another shape: that shape's failure, the process goes on
    memory = _memory_use(device)
    # the inputs' memory goes back before the reply, not after it, while the reference process starts its
    # part (unless both run each trial at once: Request.keep_cache); the outputs stay, shared, until the next request
    if not request.keep_cache:
        _free_cache(device)
    worker.kept = list(tensors)
    worker.shared = _send(
        worker.conn, to_dict(TrialOutputs(outputs=tree, inputs_changed=changed, checksum=digest, read_sums=read,
                                          upstream_changed=lifted, memory=memory, guards=worker.guards(),
                                          not_ready=not_ready, reused=reused, probed=probe)),
        tensors, share_gpu=not request.by_host)
    return True


def start_timing(worker: CandidateWorker, request: Request) -> bool:
    """The candidate's entries made and warmed up for a timing beside the reference process's."""
    observed = TimedOutputs(worker.device)
    try:
        entries = worker.entries(observed)
        worker.timing = _start(entries, worker.device, request.rule, observed)
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase="timing"))
        return False
    _send(worker.conn, to_dict(PartyReady(entries=list(entries), guards=worker.guards())))
    return True


def time_batch(worker: CandidateWorker, request: Request) -> bool:
    """One batch of the timing's calls, as the harness drew them: what each call measured."""
    try:
        sampled = _batch(worker.timing, request)
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase="timing"))
        return False
    sampled.guards = worker.guards()
    _send(worker.conn, to_dict(sampled))
    return True


def end_timing(worker: CandidateWorker, request: Request) -> bool:
    """The timing over: every timed output's samples, for the reference process to re-check."""
    samples, tensors = _end(worker.timing)  # on the host
    worker.timing = None
    memory = _memory_use(worker.device)
    _free_cache(worker.device)  # before the reply: the reference re-checks the samples next, on inputs of its own
    _send(worker.conn, to_dict(Timed(timed=samples, memory=memory, switches=worker.switches.described(),
                                     guards=worker.guards())), tensors)
    return True


def trace_streams(worker: CandidateWorker, request: Request) -> bool:
    """A few candidate calls under the profiler: which streams finished work after the caller's."""
    try:
        timed = worker.entries(None)["candidate"]
        outside, calls = _outside_windows(_trace_calls(timed))
        reply = StreamsTraced(outside_ms=outside, calls=calls)
    except Exception as exc:  # noqa: BLE001 - no profiler here (CUPTI taken): the trace's note
        reply = StreamsTraced(note=f"the profiler failed: {type(exc).__name__}: {str(exc)[:200]}")
    reply.guards = worker.guards()
    _send(worker.conn, to_dict(reply))
    return True


Handler = Callable[[CandidateWorker, Request], bool]
HANDLERS: dict[Command, Handler] = {
    Command.RELEASE: release, Command.SHAPE: set_shape, Command.GRAPH: replay_graph, Command.TRIAL: run_trial,
    Command.TIME_START: start_timing, Command.TIME_BATCH: time_batch, Command.TIME_END: end_timing,
    Command.STREAMS: trace_streams}


def _serve(worker: CandidateWorker) -> None:
    """The harness's requests until EXIT (or one this role has no handler for), or a failure."""
    while True:
        request = from_dict(Request, channel.recv(worker.conn).header)
        take_own_cores()  # a staged worker's, at its first request (CandidateSpec.staged); then nothing to take
        worker.shared.clear()
        if request.cmd is not Command.TRIAL:
            worker.kept = []  # the last trial's outputs: kept only through the next trial
        if request.cmd is not Command.GRAPH and worker.graph is not None:
            worker.graph = None  # its static inputs and outputs are a copy of each: gone once the checks move on
            _free_cache(worker.device)
        handler = HANDLERS.get(request.cmd)
        if handler is None or not handler(worker, request):
            return


def build_pair(problem, model_new, spec: CandidateSpec, device: torch.device):
    """ModelNew built afresh from get_init_inputs() with the reference's parameters (the reference is
    built from the same seeds for them, and kept on a CPU only: CANDIDATE_PROCESS_REFERENCE); the warnings of
    copying them; per reference parameter with a gradient, ModelNew's matched to it and the reference's shape
    (backward.Training's `params`); under --backward which of the reference's outputs get an upstream
    gradient; and the reference, or None."""
    init_args = list(problem.get_init_inputs())
    reference = in_mode(reference_from(problem, init_args, spec, device).to(device), spec.model_mode)
    metas = _output_metas(reference, inputs_from_seed(problem, device, new_seed())) if spec.backward else None
    parking = Parking(reference, device)
    parking.park()  # before ModelNew is built: the two models' weights never sit here beside the reference process's
    candidate = build_model(model_new, init_args, spec.init_seed, device)
    warnings, matched = copy_parameters(reference, candidate)
    trained = [(mine, p.shape) for mine, p in zip(matched, reference.parameters()) if p.requires_grad]
    kept = reference if device.type == "cpu" else None
    return in_mode(candidate.to(device), spec.model_mode), warnings, trained, metas, kept
