"""The contract between the harness and its worker processes.

Both sides use these types and nothing else: the harness sends a spec, then
requests (a Command and its arguments); each worker answers with one of the
replies below. Everything travels as a JSON header (results.to_dict) plus raw
tensors over the channel (channel.py); a reply is read back with
results.from_dict, which ignores keys it does not know.

A reply whose `error` is set is a failure, whatever reply was expected.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from ...degenerate import Degenerate
from ...integrity.roofline import Peaks
from ...results import CheckResult, Headers, Timing


class Command(str, enum.Enum):
    # to the reference process
    MAKE_TRIAL = "make_trial"  # draw a trial's inputs from a fresh seed; keep the reference's outputs
    COMPARE = "compare"  # the candidate's outputs for that trial, relayed: compare them
    TIME_REFERENCE = "time_reference"  # time the reference alone
    VERIFY_TIMED = "verify_timed"  # the candidate's timed-output samples, relayed: re-check them
    LINT = "lint"  # the problem lint (integrity/lint.py), once the problem's first check is over
    # to the candidate worker
    TRIAL = "trial"  # run on the inputs of a seed and return the outputs
    # to both: a timing beside the other process, batch by batch (timing/stages.py): the entries made and warmed
    # up, then each batch of calls the harness draws, then the end (the worker's timed outputs for the re-check)
    TIME_START = "time_start"
    TIME_BATCH = "time_batch"
    TIME_END = "time_end"
    GRAPH = "graph"  # CUDA: forward captured in a CUDA graph once, replayed on a seed's inputs; return the outputs
    # CUDA: a few calls under the profiler; which streams other than the caller's finished work after it
    STREAMS = "streams"
    RELEASE = "release"  # let go of the graph and the outputs the reference process mapped, give the memory back
    TURN = "turn"  # to a worker staged beside another problem (CandidateSpec.beside_cap): its candidate is due
    # to both: set the problem's module-level values to a shape and rebuild the models; {} is the main shape
    SHAPE = "shape"
    # to any worker
    EXIT = "exit"


# On a CPU the reference is timed in the candidate's process too, in the same rounds as the candidate, under
# this name: the verdict divides by the faster of it and the reference in its own process (timing/measure.py).
# A process's own heap and caches move a 0.1 ms call's time by up to a quarter between two processes, which no
# interval of one process's samples holds; the faster of the two never flatters, and what the candidate does
# to the one in its process can only make it slower, which the other then stands for.
CANDIDATE_PROCESS_REFERENCE = "reference_here"


# --- specs: the first message a worker gets ------------------------------------

@dataclass
class BuildSpec:
    """The build role's spec: import (and so build) the candidate under the cache entry's lock."""

    candidate: str
    lock: str
    pch_lock: str


@dataclass
class CandidateSpec(BuildSpec):
    problem: str = ""
    device: str = "cpu"
    init_seed: int = 0
    param_seed: int = 0
    env: dict[str, str] = field(default_factory=dict)  # the candidate's cache entry; the process may be a spare
    model_mode: str = "train"  # EvalOptions.model_mode
    backward: bool = False  # trials and timed calls run forward and backward (workers/backward.py)
    # Staged beside another problem's evaluation: the most device memory its models may take before its
    # turn (a bigger build waits for it), and it waits for TURN before its first request. 0: neither.
    beside_cap: int = 0
    # Staged ahead of its turn (Children.stage): a spare's worker imports and builds on the spare's cores, not on
    # the timing ones, which the evaluation in progress is using, and moves to them at its first request (or TURN).
    staged: bool = False


@dataclass
class ReferenceSpec:
    problem: str
    device: str
    tolerances: dict[str, list[float]]  # (atol, rtol) by dtype name, and "default"
    cache_dir: str
    init_seed: int
    param_seed: int
    model_mode: str = "train"  # EvalOptions.model_mode
    device_key: str = ""  # the device lock (device_lock.py) it loads the problem under; "" for none
    lock_owner: int = 0  # the harness process it loads for: the pid its lock file records
    backward: bool = False  # CandidateSpec.backward
    grad_tolerances: dict[str, list[float]] = field(default_factory=dict)  # as `tolerances`, for gradients
    # the gradients' atol gains the reference's own float32 rounding (backward.ROUNDING_FACTOR);
    # off where the problem or the command line sets the tolerance
    grad_rounding: bool = False


# --- requests -----------------------------------------------------------------

FEWER_SAMPLES = 5  # the least of StopRule.fewer_samples


@dataclass
class StopRule:
    """When timing stops (timing.time_interleaved): the one rule from the options to the worker."""

    criterion: str = "interval"  # stopping.CRITERIA's name: when the samples are enough
    target: float = 0.01  # the criterion's threshold (relative)
    min_samples: int = 10
    max_samples: int = 2000
    time_cap: float = 10.0  # seconds for the whole sampling stage
    warmup_calls: int = 3
    clock: str = "gpu"  # the headline clock (results.Clock): on a GPU its stage samples first, with the larger share
    # the other clock's stage too (a GPU has two); False: the headline's stage alone, with its share of the cap
    second_clock: bool = True

    def fewer_samples(self) -> int:
        """The fewest samples of a stage that is read against a coarser margin than the headline's (the
        other clock's, the reference alone beside a candidate): half this rule's, at least FEWER_SAMPLES."""
        return min(self.min_samples, max(FEWER_SAMPLES, self.min_samples // 2))


@dataclass
class Request:
    cmd: Command
    seed: Optional[int] = None  # TRIAL, GRAPH; MAKE_TRIAL where the harness draws it
    lint: bool = False  # MAKE_TRIAL: the draw is one of the problem lint's too (checking/trials.py's lint_in_trials)
    exact: bool = False  # MAKE_TRIAL: the trial is the numerics check's: the reference in float64 too (precision.py)
    last: bool = False  # GRAPH: no replay follows, so the graph's captured inputs can go before the reply
    rule: Optional[StopRule] = None  # TIME_START, TIME_REFERENCE
    compile_baseline: bool = False  # TIME_REFERENCE
    # TIME_START (to the reference process), TIME_REFERENCE: also time the reference under PyTorch's default
    # float32 settings
    default_numerics: bool = False
    stage: str = ""  # TIME_BATCH: the clock (results.Clock) of the stage the batch belongs to
    calls: list = field(default_factory=list)  # TIME_BATCH: [entry, seed, probe] per call, in order (stages.Call)
    unflushed: bool = False  # TIME_BATCH: calls checked and not timed: no cache flush before each
    # TIME_REFERENCE: also time twins of the reference, their parameters elsewhere, if they take at most this many bytes
    placement_budget: int = 0
    shape: Optional[dict[str, Any]] = None  # SHAPE
    # TRIAL: the outputs travel as bytes, not as CUDA IPC handles: the trial again after the reference
    # read them other than the worker summed them (TrialOutputs.read_sums)
    by_host: bool = False
    # MAKE_TRIAL, TRIAL, GRAPH and a relayed COMPARE: what the step freed stays in the process's cache for
    # the next trial, not given back to the device (checking/trials.py's side_by_side)
    keep_cache: bool = False
    # TRIAL, on a GPU: the stream-order probe (integrity/stream_order.py): inputs made behind a spin on the
    # caller's stream, outputs read there as the call returns
    probe: bool = False
    # MAKE_TRIAL, TRIAL: the seed's inputs moved to another distribution (integrity/distributions.py), an audit's
    distribution: str = ""



# --- replies ------------------------------------------------------------------

@dataclass
class Reply:
    """What every reply may say instead: that the worker failed."""

    error: str = ""  # compile_error | import_error | runtime_error | problem_error; "" when it worked
    exception: str = ""
    message: str = ""
    traceback: str = ""
    phase: str = ""  # what the worker was doing, when it knows better than the harness
    kind: str = ""  # the reply's class name, so that a reply out of order is seen as one
    # the replying process's peak memory so far, in bytes: "host" (VmHWM), and on a GPU "gpu"
    # (torch.cuda.max_memory_allocated) and "device_used" (the whole device, every process)
    memory: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = self.kind or type(self).__name__


@dataclass
class Guarded(Reply):
    """A reply from the process that runs candidate code: what each runtime guard saw, by its name
    (integrity/refusals.py)."""

    guards: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class BuildDone(Reply):
    ok: bool = False
    extensions: list[str] = field(default_factory=list)  # its load_inline calls' keyed directories, in order
    compiled: bool = False  # a compiler or linker ran for one of them (else each was built before)
    headers: Optional[Headers] = None  # what they were built with (building/extensions.headers_of); on an error too


@dataclass
class ReferenceHolding(Reply):
    """The reference process holds the device (ReferenceSpec.device_key) and loads the problem now."""


@dataclass
class ReferenceReady(Reply):
    ready: bool = False
    device_name: str = ""
    capability: str = ""
    reproducible: bool = False  # a seed reproduces the problem's inputs
    # PyTorch's default float32 settings (TF32 in cuDNN convolutions) change the reference's
    # outputs: eager as users run it is then a baseline of its own
    numerics_differ: bool = False
    warnings: list[str] = field(default_factory=list)
    roofline: dict[str, int] = field(default_factory=dict)  # what the problem declares: bytes, flops
    peaks: Optional[Peaks] = None
    hardware: list[str] = field(default_factory=list)  # facts for the first prompt, one a line
    inputs: list[str] = field(default_factory=list)  # how forward's arguments arrive, one a line
    input_bytes: int = 0  # one draw of get_inputs()
    output_bytes: int = 0  # the reference's outputs for it
    # what the reference's forward allocates beyond its outputs while it runs (a copy of its input,
    # a cuDNN workspace): any evaluation, in-process too, holds it at a forward's peak; 0 on a CPU
    workspace_bytes: int = 0
    parameter_bytes: int = 0  # the reference's parameters and buffers
    flush_bytes: int = 0  # the timing's cache-flush buffer there (timing.flush_bytes)
    available_bytes: int = 0  # memory free for the problem on the device (for both processes together)
    # other shapes to check: the problem's get_shape_variants(), or derived from its module-level ints
    shapes: list[dict[str, Any]] = field(default_factory=list)
    # the shapes to time at, the problem's get_benchmark_shapes(); empty: the main shape alone
    benchmark_shapes: list[dict[str, Any]] = field(default_factory=list)
    # under --backward: why the problem has no backward to check (no output has a gradient); "" when it has
    no_backward: str = ""
    # why its speedups measure nothing (integrity/degenerate.py): an output that ignores the inputs or repeats
    # along a dimension, under --backward no gradient reaching the inputs; empty for a problem that is not degenerate
    degenerate: list[Degenerate] = field(default_factory=list)
    # under --backward with ReferenceSpec.grad_rounding: what each gradient's atol gains, by label
    grad_allowance: dict[str, float] = field(default_factory=dict)
    # the load's wall seconds by step (the CUDA context, the wait for the device, the model, ...; the lint's,
    # asked after the first check, are added by the harness: Children.lint_problem)
    load_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Linted(Reply):
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the lint's wall seconds in the reference process


@dataclass
class CandidateReady(Guarded):
    ready: bool = False
    warnings: list[str] = field(default_factory=list)
    built_at_turn: bool = False  # staged beside another problem, its models were too big to build before its turn


@dataclass
class TrialMade(Reply):
    seed: int = 0
    checksum: list = field(default_factory=list)
    # a trial at another distribution that cannot judge the candidate: why (its reference is not finite there)
    unusable: str = ""


@dataclass
class TrialOutputs(Guarded):
    outputs: Any = None  # the tree channel.flatten made; the tensors travel beside the header
    inputs_changed: list[int] = field(default_factory=list)
    checksum: list = field(default_factory=list)
    # the outputs' checksum (integrity/digest.py) once the forward returned and the device was synchronized:
    # what the reference process must read of them
    read_sums: list = field(default_factory=list)
    not_capturable: str = ""  # GRAPH: why forward could not be captured; no outputs then
    upstream_changed: list[int] = field(default_factory=list)  # --backward: outputs whose upstream gradient it changed
    probed: bool = False  # the trial ran under the stream-order probe
    # probed: its outputs read on the caller's stream as it returned differ from the same outputs once the device
    # was synchronized (not ready on the caller's stream, or changed after it returned)
    not_ready: bool = False
    reused: bool = False  # its outputs share memory with the last trial's, which its process still held


@dataclass
class ShapeSet(Reply):
    """Both models rebuilt at the requested shape; `applied` false (with `reason`) where the
    process could not, and it went back to the main shape."""

    applied: bool = False
    reason: str = ""


@dataclass
class Checked(Reply):
    check: Optional[CheckResult] = None
    # COMPARE: what the reference process read is not what the worker summed (TrialOutputs.read_sums), so
    # nothing was compared: lost on the way, or changed after the candidate's forward returned
    read_differs: bool = False
    # COMPARE of the numerics check's trial: each floating-point output's error against float64, the
    # candidate's and eager's (integrity/precision.py), and the first output past the ratio ("" for none)
    precision: list[dict] = field(default_factory=list)
    shortfall: str = ""
    failed_calls: list[int] = field(default_factory=list)  # VERIFY_TIMED: which timed calls were wrong (from 0)


@dataclass
class PartyReady(Guarded):
    """TIME_START's answer: the entries this process times, made and warmed up."""

    entries: list[str] = field(default_factory=list)


@dataclass
class Sampled(Guarded):
    """TIME_BATCH's answer (timing/stages.py's Batch): per entry one row per call, in the order asked."""

    rows: dict[str, list[list[float]]] = field(default_factory=dict)
    overhead: Optional[dict] = None  # the stage's Overhead, on its first batch
    method: str = ""
    reused: dict[str, int] = field(default_factory=dict)


@dataclass
class Timed(Guarded):
    """TIME_END's answer from the candidate's worker."""

    timed: list[dict] = field(default_factory=list)  # recheck.TimedOutputs samples, one per observed call
    # process-wide switches the candidate left flipped in its own process (guards.BackendSwitches)
    switches: list[str] = field(default_factory=list)


@dataclass
class ReferenceTimed(Reply):
    timings: dict[str, dict[str, Timing]] = field(default_factory=dict)  # by clock, then by what was timed


@dataclass
class StreamsTraced(Guarded):
    """What a per-stream trace of a few candidate calls saw (profiling/torch_trace.outside_windows)."""

    outside_ms: dict[str, float] = field(default_factory=dict)  # stream id: its work outside the calls' windows, ms
    calls: int = 0  # calls traced
    note: str = ""  # why no trace could be taken; empty when one was
