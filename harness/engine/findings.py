"""What a phase found that ends a candidate's evaluation, with the evidence: the phases raise these,
and verdicts.py alone turns each into the verdict and its sentence (verdicts.judged)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..results import BuildResult, CheckResult, Roofline
from .processes.protocol import Reply


class Finding(Exception):
    """Ends an evaluation early; verdicts.judged says with which verdict and sentence."""

    def __str__(self) -> str:
        # raised where no evaluation fills a verdict, it still says what was found
        return super().__str__() or repr(self)


@dataclass(eq=False)
class Unreadable(Finding):
    """The candidate's file cannot be read."""

    path: str
    error: str


@dataclass(eq=False)
class NotPython(Finding):
    """The candidate's source does not parse: a build could only end in a failed import."""

    error: str  # where and why it does not parse


@dataclass(eq=False)
class StaticRefusal(Finding):
    """The static check refuses the source under the policy (integrity/static.py says why)."""

    reason: str


@dataclass(eq=False)
class BuildFailed(Finding):
    """The build failed: `error`, the build child's reply; None where the cache holds the source's failure."""

    build: BuildResult
    error: Optional[Reply] = None


@dataclass(eq=False)
class ReferenceOutOfMemory(Finding):
    """The reference process ran out of GPU memory beside the candidate's process."""

    doing: str
    message: str  # the first line of what it raised
    exception: str


@dataclass(eq=False)
class InputsDiffer(Finding):
    """The candidate's process drew other inputs than the reference's for the same seed, where the
    problem's inputs are reproducible."""


@dataclass(eq=False)
class TrialFailed(Finding):
    """A check trial's outputs do not match the reference's (`check` says how)."""

    trial: int  # from 1
    check: CheckResult


@dataclass(eq=False)
class IncorrectAtShapes(Finding):
    """Under --shapes strict: the candidate is wrong at other shapes of the problem."""

    count: int
    said: str  # each failed shape and why, as the warning without --shapes strict says them


@dataclass(eq=False)
class IncorrectOnInputs(Finding):
    """An audit's: the candidate, right on the problem's inputs, is wrong on them moved to another
    distribution (integrity/distributions.py), judged against float64 with eager's own error allowed."""

    says: str  # how the inputs were moved: "scaled by 1000"
    reason: str  # what was wrong there, as a shape's failure is said (verdicts.shape_reason)


@dataclass(eq=False)
class TimingsForged(Finding):
    """The timing reply does not hold the outputs of the calls it claims to have timed."""


@dataclass(eq=False)
class StreamOrder(Finding):
    """A check trial under the stream-order probe went wrong where the same candidate without the probe
    is right (`waits`: its work did not wait for the caller's stream), or its outputs read on the caller's
    stream as it returned were not what the device finished with (not `waits`: not ready on return)."""

    trial: int
    waits: bool


@dataclass(eq=False)
class ReusedOutputs(Finding):
    """Its outputs shared memory with those of an earlier call, which the caller still held."""

    calls: int  # how many calls did
    of: int  # out of how many (0: a check trial)


@dataclass(eq=False)
class LowerPrecision(Finding):
    """Within the tolerance, but far further from float64 than eager float32 (integrity/precision.py)."""

    output: str
    candidate: float
    eager: float
    ratio: float
    limit: float


@dataclass(eq=False)
class TimedOutputsDiffer(Finding):
    """The outputs of timed calls fail the re-check that its check trials passed."""

    check: CheckResult
    hidden_work: str  # what was seen off the caller's stream ("" for nothing)
    stream_order: bool = False  # every wrong call was one whose inputs were made behind the stream-order probe


@dataclass(eq=False)
class HiddenWork(Finding):
    """A per-stream trace saw its calls leave work running after the caller's stream was done."""

    seen: str


@dataclass(eq=False)
class SlowedReference(Finding):
    """The reference ran much slower beside the candidate than alone."""

    ratio: float
    beside_ms: float
    alone_ms: float


@dataclass(eq=False)
class BelowFloor(Finding):
    """A time below the physical floor the problem's declared bytes set at the device's peak bandwidth."""

    median_ms: float
    line: Roofline
    peak_gbs: float


@dataclass(eq=False)
class AtBenchmarkShape(Finding):
    """What ended the evaluation at one of the problem's benchmark shapes."""

    label: str
    found: Finding
