"""The timing commands both roles serve, one party each of a timing beside the other process
(timing/stages.py): TIME_START makes and warms up this process's entries, each TIME_BATCH runs the
calls the harness drew and says what each measured, TIME_END lets them go with what their outputs'
samples hold (the candidate's, for the re-check; the reference's are taken alike and dropped, so
that the sampling's work follows every timed call the same way)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import torch

from ...integrity.recheck import TimedOutputs
from ..processes.protocol import Request, Sampled, StopRule
from ..timing import clock
from ..timing.stages import Call


@dataclass
class Kept:
    """A timing's party between its batches, and what its entries' outputs left to re-check."""

    party: clock.LocalParty
    observed: TimedOutputs


def start(entries: dict[str, clock.Entry], device: torch.device, rule: StopRule, observed: TimedOutputs) -> Kept:
    return Kept(clock.LocalParty(entries, device, rule), observed)


def batch(kept: Optional[Kept], request: Request) -> Sampled:
    if kept is None:
        raise RuntimeError("a batch of timed calls came before the timing started")
    got = kept.party.batch(request.stage, [Call.of(row) for row in request.calls], flush=not request.unflushed)
    return Sampled(rows=got.rows, overhead=asdict(got.overhead) if got.overhead else None, method=got.method,
                   reused=got.reused)


def end(kept: Optional[Kept]) -> tuple[list[dict], list]:
    """The samples of every observed output, on the host, and the party's outputs let go."""
    if kept is None:
        return [], []
    kept.party.close()
    return kept.observed.message()


def observer(outputs: Optional[TimedOutputs]):
    return outputs.observe if outputs is not None else None
