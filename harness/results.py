"""Typed results of an evaluation, each with a JSON round-trip.

Every object that crosses a process boundary or lands in runs/ is one of these
dataclasses (or profiles.py's, tokens.py's, runs/records.py's); `to_json`/`from_json`
(serial.py) turn any of them into plain JSON and back.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from .degenerate import Degenerate
from .profiles import Profile
from .serial import from_dict, from_json, to_dict, to_json  # noqa: F401  the round-trip, where the types are


class Verdict(str, enum.Enum):
    """The closed set of outcomes of one evaluation."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    IMPORT_ERROR = "import_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"
    NO_CODE = "no_code"

    @property
    def sentence(self) -> str:
        return _SENTENCES[self]


_SENTENCES = {
    Verdict.CORRECT: "The candidate built, matched the reference on every trial and was timed.",
    Verdict.INCORRECT: "The candidate ran but its outputs do not match the reference.",
    Verdict.COMPILE_ERROR: "The candidate's extension failed to compile.",
    Verdict.IMPORT_ERROR: "The candidate file failed to import or does not define a usable ModelNew.",
    Verdict.RUNTIME_ERROR: "The candidate raised an error while running.",
    Verdict.TIMEOUT: "The candidate exceeded its time limit and was stopped.",
    Verdict.CRASHED: "The process running the candidate died without reporting a result.",
    Verdict.REJECTED: "The candidate was caught gaming the measurement.",
    Verdict.NO_CODE: "The answer holds no Python code block that defines ModelNew.",
}


class Headers(str, enum.Enum):
    """The torch headers a build's CUDA source was compiled with (engine/building/lean.py)."""

    LEAN = "lean"  # its umbrella includes replaced by the per-operator headers its code uses
    FULL = "full"  # as written


@dataclass
class BuildResult:
    ok: bool
    seconds: float
    cached: bool = False  # no compiler ran: this source, or each extension it builds, was built before
    key: str = ""
    log_path: str = ""
    first_errors: list[str] = field(default_factory=list)
    extensions: list[str] = field(default_factory=list)  # its extensions' directories in the cache's extensions/
    headers: Optional[Headers] = None  # full where any extension was built as written; None: none was built


@dataclass
class CheckResult:
    passed: bool
    trials: int = 0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatch_share: float = 0.0
    first_bad_index: Optional[list[int]] = None
    failed_trial: Optional[int] = None
    reasons: list[str] = field(default_factory=list)
    # trials whose outputs reached the reference process other than the candidate's process summed them,
    # run again (engine/checking/trials.py): a transfer the harness lost, or outputs changed once
    read_again: int = 0
    # the numerics check's trial (integrity/precision.py): per floating-point output, its relative error
    # against the reference in float64 ("candidate"), eager float32's ("eager"), their "ratio" and its "limit"
    precision: list[dict] = field(default_factory=list)


class Clock(str, enum.Enum):
    """What a Timing's samples measure. A verdict divides timings of one clock only."""

    GPU = "gpu"  # calls queued between events on the caller's stream, each behind a spin that outlasts its launch
    LATENCY = "latency"  # a synchronize before and after each call, events on the caller's stream (KernelBench)
    ALL_STREAMS = "all_streams"  # as LATENCY, the end taken once the whole device finished: every stream
    HOST = "host"  # a CPU: perf_counter around each call

    @property
    def text(self) -> str:
        return _CLOCK_TEXT[self]


_CLOCK_TEXT = {
    Clock.GPU: "GPU time (calls queued as do_bench does, L2 flushed before each, the launch hidden behind a spin)",
    Clock.LATENCY: "per-call latency (a synchronize before and after each call, as KernelBench times)",
    Clock.ALL_STREAMS: "per-call latency with the whole device synchronized (work ran off the caller's stream)",
    Clock.HOST: "perf_counter around each call, caches flushed",
}
# What each clock is called in a table's header or a sweep's summary.
CLOCK_NAMES = {Clock.GPU: "GPU time", Clock.LATENCY: "latency", Clock.ALL_STREAMS: "latency, every stream",
               Clock.HOST: "host time"}


class Ended(str, enum.Enum):
    """Why a timing stage stopped sampling."""

    MET = "met"  # its stopping criterion (engine/stopping.py) was met
    TIME_CAP = "time_cap"  # its share of the time cap ran out first
    SAMPLE_CAP = "sample_cap"  # it took the most samples a stage may


@dataclass
class Timing:
    """Summary of one timed callable on one clock; times in milliseconds."""

    median: float
    iqr: float
    mean: float
    min: float
    n: int
    rel_se: float
    method: str  # "cuda_events" or "perf_counter": the instrument
    overhead: float = 0.0  # what the protocol itself adds to a call: the median of an empty call
    # host time until the call returned: with queued calls the device runs earlier work meanwhile,
    # so it is outside the window unless the host falls behind; on the latency clock the device
    # waits for it, so it is the call's host path
    submit_median: float = 0.0
    samples: list[float] = field(default_factory=list)  # in round order: index i of each entry shares a round
    clock: str = ""  # a Clock's value; "" in eval.json files from before clocks were named
    # LATENCY: the median time from the caller's stream finishing to the whole device finishing, and the
    # same for an empty call: work past that ran on a stream the caller's does not wait for
    tail: float = 0.0
    tail_overhead: float = 0.0
    ended: str = ""  # why its stage stopped sampling (Ended); "" in eval.json files from before

    @property
    def on_gpu(self) -> bool:
        return self.method == "cuda_events"

    @property
    def spread(self) -> float:
        """IQR as a share of the median."""
        return self.iqr / self.median if self.median else 0.0


@dataclass
class Roofline:
    """The candidate's time against the hardware's limits (integrity/roofline.py works it out)."""

    bytes: Optional[int] = None
    flops: Optional[int] = None
    floor_ms: Optional[float] = None  # bytes at the measured peak bandwidth
    achieved_gbs: Optional[float] = None
    bandwidth_share: Optional[float] = None
    achieved_tflops: Optional[float] = None
    flops_share: Optional[float] = None


@dataclass
class Retimed:
    """The first timing in which the reference ran much slower beside the candidate than alone;
    both were timed again after it."""

    beside_ms: float
    alone_ms: float


@dataclass
class Baseline:
    """The candidate's speedup over one baseline (engine/timing/speedups.py works these out)."""

    name: str  # "eager" or "torch.compile"
    numerics: str  # "default" (PyTorch's float32 settings), "ieee" (IEEE float32), or "same" (no difference)
    key: str  # which of the timings it is
    median_ms: float
    speedup: float
    interval: list[float]  # 95%, by a bootstrap over the samples
    paired: bool  # timed in the same rounds as the candidate (else in the reference's own process)

    @property
    def label(self) -> str:
        return self.name + {"default": " (PyTorch defaults)", "ieee": " (IEEE float32)"}.get(self.numerics, "")


@dataclass
class ShapeVariant:
    """One shape other than the main one, at which the candidate was checked."""

    values: dict[str, Any]  # the problem's module-level values at this shape
    passed: Optional[bool] = None  # None: not checked (the reference failed there, or the worker had died)
    reason: str = ""  # why it failed or was not checked

    @property
    def label(self) -> str:
        return shape_label(self.values)


@dataclass
class ShapeTiming:
    """The candidate timed at one of the benchmark shapes a problem declares, beside its baselines there."""

    values: dict[str, Any]  # the problem's module-level values at this shape; {}: the main shape
    candidate_ms: float  # median
    n: int  # candidate samples
    baselines: list[Baseline] = field(default_factory=list)  # at this shape, the headline first

    @property
    def label(self) -> str:
        return shape_label(self.values)

    @property
    def speedup(self) -> Optional[float]:
        return self.baselines[0].speedup if self.baselines else None

    @property
    def interval(self) -> Optional[list[float]]:
        return self.baselines[0].interval if self.baselines else None

    @property
    def text(self) -> str:
        """One line: the shape, its speedup and the two times it comes from."""
        line = f"{self.label}: {speedup_text(self.speedup, self.interval)}, candidate {self.candidate_ms:.4g} ms"
        if self.baselines:
            line += f", {self.baselines[0].label} {self.baselines[0].median_ms:.4g} ms"
        return line


MAIN_SHAPE = "the main shape"


def shape_label(values: dict[str, Any]) -> str:
    """name=value, ... for a shape; {} is the problem's own."""
    return ", ".join(f"{name}={value!r}" for name, value in values.items()) or MAIN_SHAPE


@dataclass
class ClockFigures:
    """One evaluation's figures on one clock: the headline's live in EvalResult itself, a second
    clock's here, reported beside them and never divided by them."""

    clock: str  # a Clock's value
    timings: dict[str, Timing] = field(default_factory=dict)
    baselines: list[Baseline] = field(default_factory=list)  # the headline first
    benchmark_shapes: list[ShapeTiming] = field(default_factory=list)
    placement_spread: Optional[float] = None

    @property
    def speedup(self) -> Optional[float]:
        return self.baselines[0].speedup if self.baselines else None

    @property
    def interval(self) -> Optional[list[float]]:
        return self.baselines[0].interval if self.baselines else None


@dataclass
class HostShare:
    """A candidate whose calls take longer on the host than on the GPU: a fact about where its
    time goes, not a suspicion."""

    host_ms: float  # the call's host path, the device idle meanwhile (latency clock's submit median)
    latency_ms: float  # per call, a synchronize before and after
    gpu_ms: float  # GPU time, the queue kept full

    @property
    def text(self) -> str:
        return (f"{self.host_ms:.3g} ms of its {self.latency_ms:.3g} ms per call is spent on the host (GPU time "
                f"{self.gpu_ms:.3g} ms with the queue kept full): launches and host work are its cost where calls "
                "do not overlap, and fewer launches or a CUDA graph cut them")


@dataclass
class Environment:
    device: str
    device_name: str = ""
    arch: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    python: str = ""
    harness: str = ""
    hostname: str = ""


@dataclass
class EvalResult:
    verdict: Verdict
    explanation: str
    problem: str = ""
    candidate: str = ""
    candidate_hash: str = ""
    build: Optional[BuildResult] = None
    check: Optional[CheckResult] = None
    timings: dict[str, Timing] = field(default_factory=dict)
    speedup: Optional[float] = None  # over eager PyTorch, the faster numerics setting (baselines[0])
    speedup_interval: Optional[list[float]] = None  # 95%
    baselines: list[Baseline] = field(default_factory=list)  # every speedup, the headline first
    # the clock of `timings`, `baselines` and `speedup` (a Clock's value); "" in eval.json files from before
    clock: str = ""
    second: Optional[ClockFigures] = None  # the other clock's figures (GPU: latency beside GPU time, or the reverse)
    # GPU: work that finished after the caller's stream was done (ms per call, beyond an empty call's), confirmed
    # by a per-stream trace; the verdict was then timed on Clock.ALL_STREAMS, every stream counted
    hidden_work_ms: Optional[float] = None
    hidden_streams: list[str] = field(default_factory=list)  # the streams the trace found it on
    host_share: Optional[HostShare] = None  # GPU: set where the candidate's host path outlasts its GPU work
    # GPU: how far the reference's time moved when only its parameters' addresses changed (relative, e.g.
    # 0.004); every interval spans it too, since the candidate's parameters sit elsewhere than the reference's
    placement_spread: Optional[float] = None
    warnings: list[str] = field(default_factory=list)
    environment: Optional[Environment] = None
    seconds: float = 0.0
    # Figures of the evaluation that code reads back; None where the evaluation did not get that far.
    roofline: Optional[Roofline] = None  # only for problems that declare their bytes or flops
    reference_alone_ms: Optional[float] = None
    retimed_for_slowdown: Optional[Retimed] = None
    timed_calls_checked: Optional[int] = None
    worker_log: Optional[str] = None
    model_mode: str = ""  # "train" or "eval" (EvalOptions.model_mode); "" in eval.json files from before
    # float32's (atol, rtol) as the check applied them; given: by --atol/--rtol, over the problem's own
    tolerance: Optional[list[float]] = None
    tolerance_given: bool = False
    # under --backward: what each gradient's atol gained for the reference's own float32 rounding, by label
    grad_allowance: dict[str, float] = field(default_factory=dict)
    # forward and backward checked and timed as one call (EvalOptions.backward): `timings` and the speedups
    # are of both; "candidate_forward" and "reference_forward" time each forward alone beside them
    backward: bool = False
    phase_seconds: dict[str, float] = field(default_factory=dict)
    # the stopping criterion the timings sampled under (engine/stopping.py) and its threshold; "" before any timing
    stop: str = ""
    stop_target: Optional[float] = None
    shapes: list[ShapeVariant] = field(default_factory=list)  # the check at other shapes; empty when not run
    # the timing at each benchmark shape the problem declares, when it declares any: then `speedup` and
    # `baselines` are geometric means over them, and `timings` are the main shape's (else the first one's)
    benchmark_shapes: list[ShapeTiming] = field(default_factory=list)
    # CUDA: why the candidate's forward cannot be captured in a CUDA graph; None where it can or was not tried
    not_capturable: Optional[str] = None
    profile: Optional[Profile] = None  # one forward's kernels, for a correct candidate under --profile
    # why the problem's speedups measure nothing (degenerate.py), as its reference process found it; the verdict
    # is the candidate's own, the speedup is not read as one
    problem_degenerate: list[Degenerate] = field(default_factory=list)
    # Everything else an evaluation notes, for a person (static findings, the exception, the exit status);
    # eval.json files written before the fields above hold those here too.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.CORRECT

    @property
    def failed_shapes(self) -> list[ShapeVariant]:
        return [s for s in self.shapes if s.passed is False]

    def pass_times(self) -> dict[str, tuple[float, float, float]]:
        """Under --backward, per model ("candidate", "reference"): its forward alone, its backward (forward
        and backward, less the forward alone: medians of separate calls, so an estimate) and both, in ms;
        {} where the forward was not timed alone."""
        found = {}
        for name in ("candidate", "reference"):
            both, forward = self.timings.get(name), self.timings.get(f"{name}_forward")
            if both and forward:
                found[name] = (forward.median, max(both.median - forward.median, 0.0), both.median)
        return found

    @property
    def timed_shape(self) -> str:
        """Where `timings` were taken: the main shape, or the first benchmark shape when it is not one."""
        timed = self.benchmark_shapes
        return MAIN_SHAPE if not timed or any(not s.values for s in timed) else timed[0].label


def tolerance_text(result: "EvalResult") -> str:
    """The check's allclose tolerance as every view prints it, e.g. "atol 0.0001, rtol 0.0001 (float32)",
    with where it came from when --atol/--rtol gave it; "" for results recorded before."""
    if not result.tolerance:
        return ""
    atol, rtol = result.tolerance
    text = f"atol {atol:g}, rtol {rtol:g}" + (" (--atol/--rtol, every dtype)" if result.tolerance_given
                                              else " (float32)")
    widest = max(result.grad_allowance.items(), key=lambda item: item[1], default=None)
    if widest and widest[1] > 0:
        text += (f"; gradients' atol plus the reference's own float32 rounding, at most {widest[1]:.2g} "
                 f"({widest[0]})")
    return text


def speedup_text(speedup: Optional[float], interval: Optional[list[float]] = None) -> str:
    """A speedup as every view prints it: 1.87x, with its interval where there is one
    (1.87x [1.85-1.89]), or - where there is none."""
    if speedup is None:
        return "-"
    if interval and all(v == v for v in interval):  # NaN-free
        digits = 3 if max(interval) < 10 else 2 if max(interval) < 100 else 1  # enough to tell 1% apart
        return f"{speedup:.2f}x [{interval[0]:.{digits}f}-{interval[1]:.{digits}f}]"
    return f"{speedup:.2f}x"


def assured(speedup: float, interval: Optional[list[float]]) -> float:
    """The speedup a result is sure of: its 95% interval's lower end, where it has one, else the speedup."""
    return interval[0] if interval and all(v == v for v in interval) else speedup


def clears(speedup: float, interval: Optional[list[float]], bar: float) -> bool:
    """Whether a speedup clears a bar (the loop's acceptable and target speedups): the speedup it is
    sure of does, so that a reading above the bar whose interval reaches below it is not called done."""
    return assured(speedup, interval) >= bar


def as_list(value: Any) -> list:
    """A model's outputs as a list: one output, or a tuple or list of them."""
    return list(value) if isinstance(value, (list, tuple)) else [value]
