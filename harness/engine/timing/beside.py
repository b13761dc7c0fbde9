"""The harness's side of a timing beside: the candidate's worker and the reference process as the
two parties of stages.run, each batch a request over its channel, and the worker stopped while
the reference's batch runs.

The reference is timed in its own process, which never runs candidate code: nothing the candidate
does in its process (a hook on the reference's forward, a switch it flips, a kept input it
re-homes, a kernel it registers for an op the reference calls) reaches it, and the worker's
processes are stopped (SIGSTOP, every one of them, however detached: their subreaper is the worker)
while the reference's calls run, so none of its threads or processes runs beside them either."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...results import to_dict
from ..building.builder import paused
from ..children import Children
from ..findings import TimingsForged
from ..processes.child import Child
from ..processes.protocol import Command, PartyReady, Reply, Request, Sampled, StopRule, Timed
from ..verdicts import refuse_on_guards
from .stages import Batch, Call, Overhead


@dataclass
class Remote:
    """A party in another process: its entries, and how a request is sent and its answer read."""

    entries: list[str]
    ask: Callable[[Request], Sampled]
    pause: list[Child] = field(default_factory=list)  # stopped while this party's batch runs

    def batch(self, stage: str, calls: list[Call], flush: bool = True) -> Batch:
        with paused(self.pause):
            got = self.ask(Request(Command.TIME_BATCH, stage=stage, calls=[call.row() for call in calls],
                                   unflushed=not flush))
        try:
            overhead = Overhead(**got.overhead) if got.overhead else None
        except TypeError:
            raise TimingsForged() from None
        return Batch(rows=got.rows, overhead=overhead, method=got.method, reused=dict(got.reused))


def parties(children: Children, worker: Child, rule: StopRule, default_numerics: bool) -> list[Remote]:
    """Both processes' entries made and warmed up (TIME_START): the candidate's worker and the reference
    process as parties of one timing."""
    deadline = children.run_deadline

    def worker_says(request: Request, kind: type = Sampled, doing: str = "being timed"):
        worker.send(to_dict(request))
        reply, _ = children.talk(worker, deadline(), doing, kind)
        refuse_on_guards(reply)
        return reply

    def reference_says(request: Request, kind: type = Sampled, doing: str = "timing the reference beside it"):
        children.reference.send(to_dict(request))
        return children.reference_says(deadline(), kind, doing)

    ready = worker_says(Request(Command.TIME_START, rule=rule), PartyReady, "making its timed calls ready")
    if "candidate" not in ready.entries:
        raise TimingsForged()
    theirs = reference_says(Request(Command.TIME_START, rule=rule, default_numerics=default_numerics), PartyReady,
                            "making the reference's timed calls ready")
    return [Remote(ready.entries, worker_says), Remote(theirs.entries, reference_says, pause=[worker])]


def end(children: Children, worker: Child) -> tuple[Timed, object]:
    """Both parties let go of their entries (TIME_END): the worker's answer with its timed outputs'
    samples, and the message they came in (relayed raw to the re-check)."""
    deadline = children.run_deadline()
    worker.send(to_dict(Request(Command.TIME_END)))
    reply, message = children.talk(worker, deadline, "handing over its timed outputs", Timed, raw=True)
    refuse_on_guards(reply)
    children.reference.send(to_dict(Request(Command.TIME_END)))
    children.reference_says(deadline, Reply, "ending the reference's timing")
    return reply, message
