"""Every way a child can end a candidate's evaluation early, turned into a verdict in one place:
its error replies, its death, a reply that breaks the protocol or is forged, a step past its
limit, and the runtime guards' findings (refuse_on_guards)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TypeVar

from ..integrity.refusals import first_refusal
from ..results import BuildResult, CheckResult, EvalResult, Verdict, from_dict
from .process import Child, ChildBrokeProtocol, ChildDied, ChildTimeout
from .protocol import Guarded, Reply

R = TypeVar("R", bound=Reply)


class Stop(Exception):
    """Ends an evaluation early with a finished result."""

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
                    f"and its processes were stopped; see {log}.", limit=child.breach, log=str(log),
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
