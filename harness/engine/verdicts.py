"""Every way a candidate's evaluation can end early, turned into a verdict and its sentence in one
place: what the phases found (findings.py, judged), and a child's error replies, its death, a reply
that breaks the protocol or is forged, a step past its limit, and the runtime guards' findings
(refuse_on_guards)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, TypeVar

from ..integrity.refusals import first_refusal
from ..results import (CLOCK_NAMES, BuildResult, CheckResult, Clock, EvalResult, Verdict, from_dict, speedup_text,
                       to_dict)
from ..stats import geomean
from .findings import (AtBenchmarkShape, BelowFloor, BuildFailed, Finding, HiddenWork, IncorrectAtShapes,
                       IncorrectOnInputs, InputsDiffer, LowerPrecision, NotPython, ReferenceOutOfMemory, ReusedOutputs,
                       SlowedReference, StaticRefusal, StreamOrder, TimedOutputsDiffer, TimingsForged, TrialFailed,
                       Unreadable)
from .processes.child import Child, ChildBrokeProtocol, ChildDied, ChildTimeout
from .processes.protocol import Guarded, Reply

R = TypeVar("R", bound=Reply)

# How a candidate keeps PyTorch's stream order (integrity/stream_order.py), as its verdicts say it
HOW_TO_FIX = ("make a side stream wait for the caller's first (side.wait_stream(torch.cuda.current_stream())), "
              "and the caller's for it before returning (torch.cuda.current_stream().wait_stream(side)), with "
              "out.record_stream(torch.cuda.current_stream()) for what it allocated there")


class Stop(Finding):
    """Ends an evaluation early with a finished result: a finding judged, its verdict and sentence written."""

    def __init__(self, verdict: Verdict, explanation: str, **details):
        super().__init__(explanation)
        self.verdict, self.explanation, self.details = verdict, explanation, details
        self.build: Optional[BuildResult] = None
        self.check: Optional[CheckResult] = None  # the failed trial, where the check failed

    def fill(self, result: EvalResult) -> None:
        result.verdict, result.explanation = self.verdict, self.explanation
        result.build = self.build or result.build
        result.check = result.check or self.check  # a check that passed at the main shape stands
        result.details.update(self.details)


@dataclass(frozen=True)
class Deadline:
    """When a step must end, and what its limit is made of: the message that names a step
    which ran past it says both."""

    at: float  # time.monotonic()
    limit: float  # seconds
    basis: str  # "the run timeout", "the time cap's 10 s of sampling, then the run timeout"

    @property
    def spent(self) -> float:
        return time.monotonic() - (self.at - self.limit)


def after(limit: float, basis: str) -> Deadline:
    return Deadline(time.monotonic() + limit, limit, basis)


def child_error(reply: Reply, doing: str) -> Stop:
    verdict = {"compile_error": Verdict.COMPILE_ERROR, "import_error": Verdict.IMPORT_ERROR}.get(
        reply.error, Verdict.RUNTIME_ERROR)
    exc = reply.exception or None
    message = str(reply.message).strip()
    first = message.splitlines()[0] if message else ""
    what = f"it raised {exc}: {first}" if exc else first
    return Stop(verdict, f"{verdict.sentence} While {doing}, {what}"[:1500],
                exception=exc, message=message[:4000], traceback=str(reply.traceback)[-4000:])


def read_reply(kind: type[R], message) -> R:
    """A worker's reply as the type the protocol says; a reply that is not one, or not the
    one due now (an error reply aside), counts as forged."""
    sent = message.header.get("kind")
    try:
        reply = from_dict(kind, message.header)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its reply is not a {kind.__name__}: "
                   f"the reply was forged ({type(exc).__name__}: {exc}).", channel="malformed reply") from None
    if sent != kind.__name__ and not (sent == Reply.__name__ and reply.error):
        raise Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} On the harness's private channel it sent "
                   f"{'a ' + str(sent) if sent else 'a message of no kind'} where a {kind.__name__} was due: "
                   "the reply was forged or out of order.", channel="reply out of order")
    return reply


def compile_errors(build: BuildResult, note: str = "") -> str:
    return (f"{Verdict.COMPILE_ERROR.sentence} {note}First errors:\n" + "\n".join(build.first_errors)
            + f"\nFull log: {build.log_path}")


def died(doing: str, status: str, child: Child) -> Stop:
    log = child.log_path
    if child.breach:
        return Stop(Verdict.RUNTIME_ERROR, f"The candidate went over a limit while {doing}: {child.breach}, "
                    f"and its processes were stopped; see {log}.", limit=child.breach, over=child.over, log=str(log),
                    peak_host_memory=child.peak_memory)
    return Stop(Verdict.CRASHED, f"The worker {status} while {doing}; see {log}.", exit=status, log=str(log))


def broke_protocol(doing: str, what: str) -> Stop:
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} While {doing}, its process wrote to the "
                f"harness's private channel something that is not a message of the protocol ({what}).",
                channel=what)


def timeout(doing: str, deadline: Deadline, log: Path) -> Stop:
    return Stop(Verdict.TIMEOUT, f"The candidate was still {doing} after {deadline.limit:.0f} s "
                f"({deadline.basis}) and was stopped; see {log}.", limit_s=deadline.limit, log=str(log))


def received(child: Child, deadline: Deadline, doing: str, raw: bool = False):
    """The child's next message; its silence past the deadline, its death or a frame that breaks
    the protocol ends the evaluation with that verdict."""
    try:
        return child.recv(deadline.at, raw=raw)
    except ChildTimeout:
        raise timeout(doing, deadline, child.log_path) from None
    except ChildDied as exc:
        raise died(doing, exc.status, child) from None
    except ChildBrokeProtocol as exc:
        raise broke_protocol(doing, str(exc)) from None


def refuse_on_guards(reply: Guarded) -> None:
    """The runtime guards' findings in a worker's reply (integrity/refusals.py): the first a rejection."""
    found = first_refusal(reply.guards)
    if found:
        refusal, seen = found
        raise Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} {refusal.reason(seen)}", **{refusal.name: seen})


# --- what the phases found ---------------------------------------------------------

def correct(result: EvalResult, backward: bool) -> None:
    """The verdict of a candidate that passed every check, its time beside the headline baseline's
    (result.baselines[0])."""
    shapes, headline = result.benchmark_shapes, result.baselines[0]
    result.verdict = Verdict.CORRECT
    over, candidate_ms = ((f"Geometric mean over {len(shapes)} benchmark shapes: candidate",
                           geomean([s.candidate_ms for s in shapes])) if shapes
                          else ("Candidate", result.timings["candidate"].median))
    result.explanation = (f"{Verdict.CORRECT.sentence} {over} {candidate_ms:.4g} ms, {headline.label} "
                          f"{headline.median_ms:.4g} ms: "
                          f"{speedup_text(result.speedup, result.speedup_interval)}"
                          f"{' (forward and backward)' if backward else ''}"
                          f"{_on_clock(result.clock)}.")


def _on_clock(clock: str) -> str:
    """The clock a verdict names: none on the host's, where it is the only one."""
    return f" on {CLOCK_NAMES[Clock(clock)]}" if clock not in ("", Clock.HOST) else ""


def judged(found: Finding) -> Stop:
    """The verdict and its sentence for what a phase found, the finding's name in its details (an audit
    names the check that caught what the fast verdict missed by it)."""
    if isinstance(found, Stop):
        return found
    stop = _JUDGES[type(found)](found)
    stop.details.setdefault("finding", type(found).__name__)
    return stop


def shape_reason(found: Finding) -> str:
    """Why the candidate failed at one of the problem's other shapes: the verdict's sentence, less its
    verdict's own first words."""
    return judged(found).explanation.removeprefix(Verdict.INCORRECT.sentence).strip().rstrip(".")[:800]


def _unreadable(found: Unreadable) -> Stop:
    return Stop(Verdict.IMPORT_ERROR, f"Candidate file {found.path} cannot be read: {found.error}.")


def _not_python(found: NotPython) -> Stop:
    return Stop(Verdict.IMPORT_ERROR, f"{Verdict.IMPORT_ERROR.sentence} It is not valid Python, so nothing was "
                f"built: {found.error}.")


def _static_refusal(found: StaticRefusal) -> Stop:
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} {found.reason}")


def _build_failed(found: BuildFailed) -> Stop:
    if found.error is None:
        stop = Stop(Verdict.COMPILE_ERROR, compile_errors(found.build, "(cached: this source failed before) "))
    else:
        stop = child_error(found.error, "importing (building) the candidate")
        if stop.verdict is Verdict.COMPILE_ERROR and found.build.first_errors:
            stop.explanation = compile_errors(found.build)
    stop.build = found.build
    return stop


def _reference_out_of_memory(found: ReferenceOutOfMemory) -> Stop:
    return Stop(Verdict.RUNTIME_ERROR, f"The reference process ran out of GPU memory while {found.doing}, beside "
                f"this candidate's process: {found.message}", exception=found.exception)


def _inputs_differ(found: InputsDiffer) -> Stop:
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its process drew different inputs "
                "from the reference's for the same seed, although the problem's inputs are "
                "reproducible: it changed how inputs are drawn.")


def _trial_failed(found: TrialFailed) -> Stop:
    stop = Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} Trial {found.trial}: "
                + "; ".join(found.check.reasons) + ".")
    stop.check = found.check
    return stop


def _incorrect_at_shapes(found: IncorrectAtShapes) -> Stop:
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It is correct at the main shape but not "
                f"at {found.count} other shape(s) (--shapes strict): {found.said}"[:3000])


def _incorrect_on_inputs(found: IncorrectOnInputs) -> Stop:
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It is correct on the problem's inputs but not on "
                f"them {found.says}, judged against the reference computed in float64 with eager float32's own error "
                f"there allowed: {found.reason}."[:3000])


def _timings_forged(found: TimingsForged) -> Stop:
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its timing reply does not hold the "
                "outputs of the calls it claims to have timed: the reply was forged.")


def _stream_order(found: StreamOrder) -> Stop:
    what = ("its work does not wait for the caller's stream: with the trial's inputs made on the caller's stream "
            "behind a delay, its outputs came from the values there before (right without the delay)"
            if found.waits else
            "its outputs were not ready on the caller's stream when it returned: read there at once, they differ "
            "from what the device held once every stream was done (they changed after it returned)")
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} Trial {found.trial}: {what}. PyTorch's stream "
                f"order is part of an op's contract; {HOW_TO_FIX}.", stream_order="waits" if found.waits else "ready")


def _reused_outputs(found: ReusedOutputs) -> Stop:
    where = (f"{found.calls} of its {found.of} timed calls returned" if found.of
             else "a check trial returned")
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} {where} outputs in the memory of an earlier "
                "call's outputs, which the caller still held: an output that changes under a caller who kept it. "
                "Return fresh tensors from each call (the reference does).", reused_outputs=found.calls or 1)


def _lower_precision(found: LowerPrecision) -> Stop:
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It is within the tolerance, but its {found.output} "
                f"is {found.ratio:.0f}x further from the reference computed in float64 than eager float32 is on the "
                f"same inputs (relative RMS error {found.candidate:.3g} against {found.eager:.3g}; at most "
                f"{found.limit:.0f}x is float32's): it computed in lower precision (TF32, half or bfloat16, "
                "Triton's default tl.dot) or approximated. float32 here means IEEE float32.",
                precision={"output": found.output, "candidate": found.candidate, "eager": found.eager,
                           "ratio": found.ratio})


def _hidden_work(found: HiddenWork) -> Stop:
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} {found.seen[0].upper()}{found.seen[1:]}: the "
                "timed window missed that work, so its time is not known, and a caller reading its outputs on its "
                f"own stream could read them unfinished. Join every stream it uses to the caller's before "
                f"returning; {HOW_TO_FIX}.")


def _timed_outputs_differ(found: TimedOutputsDiffer) -> Stop:
    # Trials synchronize the device before reading outputs; timed calls follow one another
    # on the caller's stream, where unfinished work elsewhere shows as wrong outputs.
    # Say what was measured; name a stream only where the trace saw work on one.
    if found.stream_order:
        why = ("Every wrong call was one whose inputs were made on the caller's stream behind a delay (the "
               "stream-order probe): its work does not wait for the caller's stream; " + HOW_TO_FIX)
    elif found.hidden_work:
        why = (f"Also, {found.hidden_work}: work left running on another stream or thread, which the caller's "
               "stream does not wait for, would leave calls queued after it reading outputs not yet written")
    else:
        why = ("No work was seen off the caller's stream: the outputs of its timed calls differ from those "
               "of its check trials, as call counting, cached outputs or gradients, or skipped work "
               "would make them")
    return Stop(Verdict.INCORRECT, f"{Verdict.INCORRECT.sentence} It passed the check trials, but "
                f"while being timed {'; '.join(found.check.reasons)}. {why}.", timed_check=to_dict(found.check))


def _slowed_reference(found: SlowedReference) -> Stop:
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} The reference ran {found.ratio:.1f}x slower "
                f"beside the candidate ({found.beside_ms:.4g} ms) than alone ({found.alone_ms:.4g} ms), in its own "
                "process, with the candidate's processes stopped while it ran: the candidate slowed the reference "
                "down to inflate its speedup.")


def _below_floor(found: BelowFloor) -> Stop:
    line = found.line
    return Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its {found.median_ms:.4g} ms is below the "
                f"physical floor of {line.floor_ms:.4g} ms: moving the problem's {line.bytes / 1e6:.0f} MB "
                f"would take {line.achieved_gbs:.0f} GB/s, above the measured peak of "
                f"{found.peak_gbs:.0f} GB/s. The clock did not see all of its work.")


def _at_benchmark_shape(found: AtBenchmarkShape) -> Stop:
    stop = judged(found.found)
    stop.explanation = f"{stop.explanation} (at benchmark shape {found.label})"
    return stop


_JUDGES: dict[type, Callable[..., Stop]] = {
    Unreadable: _unreadable, NotPython: _not_python, StaticRefusal: _static_refusal, BuildFailed: _build_failed,
    ReferenceOutOfMemory: _reference_out_of_memory, InputsDiffer: _inputs_differ,
    TrialFailed: _trial_failed, IncorrectAtShapes: _incorrect_at_shapes, IncorrectOnInputs: _incorrect_on_inputs,
    TimingsForged: _timings_forged,
    TimedOutputsDiffer: _timed_outputs_differ, SlowedReference: _slowed_reference, BelowFloor: _below_floor,
    AtBenchmarkShape: _at_benchmark_shape, StreamOrder: _stream_order, ReusedOutputs: _reused_outputs,
    LowerPrecision: _lower_precision, HiddenWork: _hidden_work}
