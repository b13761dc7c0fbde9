"""The candidate role: the one process that runs candidate code.

It imports the built candidate, runs it on the inputs it is handed (the reference process
compares the outputs), and times it interleaved with the reference on inputs of
its own, sampling every timed output for the reference process to re-check. Every reply
carries what the runtime guards saw. After the import it serves the harness's requests, one
handler each (HANDLERS).
"""
from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable, Optional

import torch

from ...files import new_seed
from ...integrity import digest as digests
from ...integrity import guards
from ...integrity.guards import BackendSwitches, Guard, L2Watch, ThreadWatch, findings
from ...integrity.recheck import TimedOutputs
from ...problem import Shapes
from ...results import from_dict, to_dict
from ..checking import compare
from ..processes import channel
from ..processes.cores import take_own_cores
from ..processes.ownership import tree_cpu_seconds
from ..processes.protocol import (CandidateReady, CandidateSpec, Command, Reply, Request, ShapeSet, StreamsTraced,
                                  Timed, TrialOutputs)
from ..profiling import torch_trace
from ..timing import clock
from . import backward
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
                           ("harness.torch_trace", torch_trace),
                           ("harness.channel", channel), ("harness.compare", compare),
                           ("harness.guards", guards), ("harness.digest", digests),
                           ("torch.autograd", torch.autograd), ("harness.backward", backward)):
    GUARD.take(_label, _namespace)
# the functions this module calls after candidate code has run, kept unswappable
_send, _time_interleaved, _at_default_numerics = channel.send, clock.time_interleaved, guards.at_default_numerics
_digest, _totals, _changed, _memory_use = digests.digest, digests.totals, digests.changed, memory_use
_free_cache, _SameTensors, _park, _unpark = free_cache, SameTensors, Parking.park, Parking.unpark
_trial, _timed_training, _output_metas = backward.trial, backward.timed, backward.output_metas
_trace_calls, _late_streams = clock.trace_calls, torch_trace.late_streams
# taken at import, before the candidate's code can replace them
_monotonic, _process_time, _thread_time = time.monotonic, time.process_time, time.thread_time
_set_memory_fraction, _memory_stats = torch.cuda.set_per_process_memory_fraction, torch.cuda.memory_stats
_device_properties, _current_device = torch.cuda.get_device_properties, torch.cuda.current_device


@dataclass
class CandidateWorker:
    """What the candidate's worker keeps between requests: both models at the current shape, the
    runtime guards' watchers, the CUDA graph while it is checked, and the outputs it shares."""

    conn: channel.Channel
    spec: CandidateSpec
    device: torch.device
    problem: ModuleType
    model_new: type
    watch: ThreadWatch
    switches: BackendSwitches  # as the harness set them: the reference beside the candidate runs so
    l2: L2Watch
    shapes: Shapes
    reference: Optional[torch.nn.Module] = None  # here only to be timed, where no state is restored
    parking: Optional[Parking] = None
    candidate: Optional[torch.nn.Module] = None
    state: Optional[State] = None
    matched: Optional[list] = None
    graph: Optional["CapturedForward"] = None
    # outputs the reference process maps (CUDA IPC): alive until it has answered
    shared: list = field(default_factory=list)

    def build(self) -> list[str]:
        """Both models built afresh at the current shape (build_pair); the warnings of copying the parameters."""
        self.reference, self.parking, self.candidate, warnings, self.matched = build_pair(
            self.problem, self.model_new, self.spec, self.device)
        self.state = State(self.candidate)
        return warnings

    def guards(self) -> dict[str, list[str]]:
        return findings(GUARD, self.watch, self.l2)

    def entries(self, observed: Optional[TimedOutputs], mirrored: Optional[TimedOutputs],
                default_numerics: bool) -> dict[str, clock.Entry]:
        return _entries(self.problem, self.device, self.reference, self.candidate, self.matched, observed, mirrored,
                        default_numerics, self.spec.backward)


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
    switches, l2 = BackendSwitches(), L2Watch(device, clock.l2_persistence)
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
    worker = CandidateWorker(conn, spec, device, problem, model_new, watch, switches, l2, Shapes(problem))
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
    worker.reference = worker.parking = worker.candidate = worker.state = worker.matched = None
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
    """Both models rebuilt at another shape ({} the main one)."""
    # the old shape's models go first: the device never holds them beside the new ones
    worker.reference = worker.parking = worker.candidate = worker.state = worker.matched = None
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
    shared with the reference process, and whether it changed its inputs."""
    device, spec = worker.device, worker.spec
    phase = "drawing the trial's inputs"
    try:  # inside the try: running out of memory here is still this candidate's run
        worker.state.restore()
        inputs = inputs_from_seed(worker.problem, device, request.seed)
        # taken before the candidate sees them: block sums, not a second copy of the inputs
        before = _digest(inputs)
        digest = _totals(before)
        phase = "running ModelNew" + (" forward and backward" if spec.backward else "")
        lifted: list[int] = []
        if spec.backward:
            outputs, lifted = _trial(backward.Training(worker.candidate, worker.matched), inputs, request.seed,
                                     device, _digest, _changed)
        else:
            with torch.no_grad():
                outputs = worker.candidate(*inputs)
        sync(device)
        changed = _changed(before, _digest(inputs))
        del inputs, before
        tensors: list = []
        tree = channel.flatten(outputs, tensors)
        sync(device)
        read = _totals(_digest(tensors))  # what the reference process must read of them
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase=phase))
        return bool(worker.shapes.main)  # at another shape: that shape's failure, the process goes on
    memory = _memory_use(device)
    # the inputs' memory goes back before the reply, not after it, while the reference process starts its
    # part (unless both run each trial at once: Request.keep_cache); the outputs stay, shared, until the next request
    if not request.keep_cache:
        _free_cache(device)
    worker.shared = _send(
        worker.conn, to_dict(TrialOutputs(outputs=tree, inputs_changed=changed, checksum=digest, read_sums=read,
                                          upstream_changed=lifted, memory=memory, guards=worker.guards())),
        tensors, share_gpu=not request.by_host)
    return True


def time_both(worker: CandidateWorker, request: Request) -> bool:
    """Candidate and reference timed interleaved, every timed output sampled for the re-check."""
    device = worker.device
    observed = TimedOutputs(device)
    # the reference's outputs are sampled the same way and dropped: the sampling's host and
    # device work then follows every timed call alike, not the candidate's alone
    mirrored = TimedOutputs(device)
    try:
        rule = request.rule
        _unpark(worker.parking)
        entries = worker.entries(observed, mirrored, request.default_numerics)
        for name, entry in entries.items():
            if name.startswith("reference"):
                entry.around = worker.switches.as_taken
        beside = _cpu_beside() if device.type == "cpu" else None
        results = _time_interleaved(entries, device, rule)
        background = beside() if beside else None
        _park(worker.parking)
    except BaseException as exc:  # noqa: BLE001
        channel.send(worker.conn, error_message("runtime_error", exc, phase="timing"))
        return False
    samples, tensors = observed.message()  # on the host
    memory = _memory_use(device)
    # the entries hold both models: at a new shape the old ones must be free to go
    del observed, mirrored, entries
    _free_cache(device)  # before the reply: the reference re-checks the samples next, on inputs of its own
    _send(worker.conn, to_dict(Timed(timings=results, timed=samples, memory=memory,
                                     switches=worker.switches.described(), guards=worker.guards(),
                                     background_cpu_share=background)), tensors)
    return True


def _cpu_beside() -> Callable[[], float]:
    """Counts the CPU this worker's process tree spends beyond this thread from now (threads or
    processes the candidate left running beside the timed calls); the function returned gives it as
    a share of the wall time since."""
    pid = os.getpid()
    wall, process, thread, tree = _monotonic(), _process_time(), _thread_time(), tree_cpu_seconds(pid)

    def share() -> float:
        spent = (_process_time() - process) - (_thread_time() - thread) + tree_cpu_seconds(pid) - tree
        elapsed = _monotonic() - wall
        return max(spent, 0.0) / elapsed if elapsed > 0 else 0.0
    return share


def trace_streams(worker: CandidateWorker, request: Request) -> bool:
    """A few candidate calls under the profiler: which streams finished work after the caller's."""
    try:
        timed = worker.entries(None, None, False)["candidate"]
        late, calls = _late_streams(_trace_calls(timed))
        reply = StreamsTraced(late_ms=late, calls=calls)
    except Exception as exc:  # noqa: BLE001 - no profiler here (CUPTI taken): the trace's note
        reply = StreamsTraced(note=f"the profiler failed: {type(exc).__name__}: {str(exc)[:200]}")
    reply.guards = worker.guards()
    _send(worker.conn, to_dict(reply))
    return True


Handler = Callable[[CandidateWorker, Request], bool]
HANDLERS: dict[Command, Handler] = {
    Command.RELEASE: release, Command.SHAPE: set_shape, Command.GRAPH: replay_graph, Command.TRIAL: run_trial,
    Command.TIME: time_both, Command.STREAMS: trace_streams}


def _serve(worker: CandidateWorker) -> None:
    """The harness's requests until EXIT (or one this role has no handler for), or a failure."""
    while True:
        request = from_dict(Request, channel.recv(worker.conn).header)
        take_own_cores()  # a staged worker's, at its first request (CandidateSpec.staged); then nothing to take
        worker.shared.clear()
        if request.cmd is not Command.GRAPH and worker.graph is not None:
            worker.graph = None  # its static inputs and outputs are a copy of each: gone once the checks move on
            _free_cache(worker.device)
        handler = HANDLERS.get(request.cmd)
        if handler is None or not handler(worker, request):
            return


def _entries(problem, device: torch.device, reference, candidate, matched, observed: Optional[TimedOutputs],
             mirrored: Optional[TimedOutputs], default_numerics: bool, training: bool) -> dict[str, clock.Entry]:
    if training:
        return _training_entries(problem, device, reference, candidate, matched, observed, mirrored, default_numerics)
    return _forward_entries(problem, device, reference, candidate, observed, mirrored, default_numerics)


def _forward_entries(problem, device: torch.device, reference, candidate, observed: TimedOutputs,
                     mirrored: TimedOutputs, default_numerics: bool) -> dict[str, clock.Entry]:
    # Both models read the same tensors (kept call after call where small; each call's inputs
    # written into them first): inputs at addresses of each model's own would be one more
    # placement the twins do not vary.
    inputs = _SameTensors(problem, device)
    entries = {"candidate": clock.Entry(inputs, candidate, _observer(observed), warmups=clock.RAN_HERE),
               "reference": clock.Entry(inputs, reference, _observer(mirrored))}
    if default_numerics:  # eager as users run it, beside the candidate too
        entries["reference_defaults"] = clock.Entry(inputs, _at_default_numerics(reference), _observer(mirrored))
    return entries


def _training_entries(problem, device: torch.device, reference, candidate, matched, observed: TimedOutputs,
                      mirrored: TimedOutputs, default_numerics: bool) -> dict[str, clock.Entry]:
    """--backward: forward and backward as one timed call under the usual keys, and each forward
    alone beside them (unchecked, shown only)."""
    found = _output_metas(reference, inputs_from_seed(problem, device, new_seed()))
    own = backward.own_parameters(reference)
    entries = {"candidate": replace(_timed_training(_SameTensors(problem, device), candidate, matched, found, device,
                                                    _observer(observed)), warmups=clock.RAN_HERE),
               "reference": _timed_training(_SameTensors(problem, device), reference, own, found, device,
                                            _observer(mirrored))}
    if default_numerics:
        entries["reference_defaults"] = _timed_training(_SameTensors(problem, device), reference, own, found, device,
                                                        _observer(mirrored), _at_default_numerics)
    entries["candidate_forward"] = clock.Entry(_SameTensors(problem, device), candidate, warmups=clock.RAN_HERE)
    entries["reference_forward"] = clock.Entry(_SameTensors(problem, device), reference)
    return entries


def _observer(outputs: Optional[TimedOutputs]):
    return outputs.observe if outputs is not None else None


def build_pair(problem, model_new, spec: CandidateSpec, device: torch.device):
    """The reference (parked: see Parking) and ModelNew, built afresh from get_init_inputs(), with the
    same parameters; the warnings of copying them; and per reference parameter with a gradient,
    ModelNew's matched to it and the reference's shape (backward.Training's `params`)."""
    init_args = list(problem.get_init_inputs())
    reference = in_mode(reference_from(problem, init_args, spec, device).to(device), spec.model_mode)
    parking = Parking(reference, device)
    parking.park()  # before ModelNew is built: the two models' weights never sit here beside the reference process's
    candidate = build_model(model_new, init_args, spec.init_seed, device)
    warnings, matched = copy_parameters(reference, candidate)
    trained = [(mine, p.shape) for mine, p in zip(matched, reference.parameters()) if p.requires_grad]
    return reference, parking, in_mode(candidate.to(device), spec.model_mode), warnings, trained


class NotCapturable(Exception):
    """The candidate's forward could not be captured in a CUDA graph; the message says why."""


def _release_generator() -> None:
    """A capture that fails leaves the CUDA generator counting itself mid-capture (PyTorch ends the
    count only when a capture completes), and every later random draw on the device then raises
    "Offset increment outside graph capture": a fresh state at the same seed and offset ends it."""
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    generator.graphsafe_set_state(generator.clone_state())


class CapturedForward:
    """The candidate's forward captured once in a CUDA graph on static inputs; each replay
    copies new inputs into them first, as a serving stack does."""

    def __init__(self, model: torch.nn.Module, inputs: list):
        self.static = inputs  # drawn for this capture alone, so no copy
        try:
            # warm-up on a side stream, as torch.cuda.graphs asks: lazy inits stay out of the capture
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                model(*self.static)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            _free_cache(torch.device("cuda"))  # the warm-up's outputs: the graph's own pool cannot reuse them
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.no_grad():
                self.outputs = model(*self.static)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - any failure to capture is the note's reason
            _release_generator()
            raise NotCapturable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]) from None

    def drop_inputs(self) -> None:
        """Lets the captured inputs go; the graph reads them, so it is not replayed again."""
        self.static = None

    def replay(self, inputs: list):
        if self.static is None:
            raise RuntimeError("the CUDA graph's captured inputs are gone; it is not replayed again")
        for static, new in zip(self.static, inputs):
            if isinstance(static, torch.Tensor):
                static.copy_(new)
        self.graph.replay()
        torch.cuda.synchronize()
        return self.outputs
