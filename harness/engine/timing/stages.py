"""The sampling stages of one timing, driven from outside the processes that make the calls.

A timing samples several callables (entries) held by one or more parties: the candidate's worker
holds the candidate, the reference process the reference; the reference alone and its twins are
one party in one process (clock.LocalParty). This driver draws every call's seed, the order of the
calls and which of them carry the stream-order probe, hands each party a batch of calls in turn
(which party goes first drawn anew for every pair of batches), and reads back what each call
measured, until the stage's stopping rule is met after its fewest samples, or its share of the
time cap is spent (stopping.py). Batches of the parties alternate in the same number of rounds,
so sample i of every entry comes from one round: the interval's bootstrap pairs them
(stats.ratio_interval).

So a party that runs candidate code learns a call's seed, or whether the call is probed, only with
the batch that makes it, and it never draws them: nothing it replaces (`random.seed`,
`os.urandom`) can foresee them. The party whose batch is not running is paused by its own
Party.batch (RemotePeer.others), so neither runs beside the other's calls.

Pure Python: the harness process, which never imports torch, drives the parties over their channels.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Optional, Protocol

from ...results import Clock, Ended, Timing
from ...stats import summarize
from .. import stopping
from ..processes.protocol import StopRule
from ..scrutiny import FAST

# The headline clock's stage takes this share of the time cap, the other clock's the rest.
HEADLINE_SHARE = 0.65
# ...and is reported beside the headline, never divided by it: it stops at a threshold this many
# times coarser, after fewer samples (StopRule.fewer_samples).
SECOND_COARSER = 2.0
# Of each entry's queued calls in a batch, a share (scrutiny.Scrutiny.probe_share, at least one) makes its
# inputs on the caller's stream behind a device spin (the stream-order probe, clock.CudaSampler.queue): work
# that does not wait for the caller's stream then reads other values, and the re-check of the timed outputs
# sees it.
# A batch is about this long, so the device runs long stretches without waiting on the host.
BATCH_S = 0.2
MAX_ROUNDS = 200


@dataclass
class Call:
    """One call a party makes: which entry, on the inputs of which seed, probed or not."""

    entry: str
    seed: int
    probe: bool = False

    def row(self) -> list:
        return [self.entry, self.seed, self.probe]

    @classmethod
    def of(cls, row: list) -> "Call":
        entry, seed, probe = row
        return cls(str(entry), int(seed), bool(probe))


@dataclass
class Overhead:
    """What the protocol adds to any call on a stage's clock, measured on empty calls (ms): on the
    latency stage also its tail's and the every-stream clock's."""

    call: float = 0.0
    tail: float = 0.0
    whole: float = 0.0


@dataclass
class Batch:
    """A party's answer to one batch: per entry, one row per call in the order asked. Queued and host
    stages: [elapsed, submit]; the latency stage: [latency, tail, host]. The stage's overhead on its
    first batch; a call whose output shares storage with the same entry's previous call's, kept alive
    by the caller meanwhile, is listed in `reused` (an output that changes under a caller who kept it)."""

    rows: dict[str, list[list[float]]] = field(default_factory=dict)
    overhead: Optional[Overhead] = None
    method: str = ""
    reused: dict[str, int] = field(default_factory=dict)


class Party(Protocol):
    entries: list[str]

    def batch(self, stage: str, calls: list[Call], flush: bool = True) -> Batch:
        """Make `calls` (each entry's in order) on `stage`'s clock, measuring the stage's overhead first on
        its first batch; without `flush`, calls checked and not timed, no cache flush before each."""


@dataclass
class Taken:
    """What a stage took of one entry so far."""

    samples: list[float] = field(default_factory=list)
    submit: list[float] = field(default_factory=list)
    tails: list[float] = field(default_factory=list)
    probed: list[bool] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


@dataclass
class Sampling:
    """A whole timing: {clock: {entry: Timing}}, the seeds and probes of each entry's queued and host
    calls in the order made (the re-check's, and its sentence's, record), and the reused outputs seen."""

    clocked: dict[str, dict[str, Timing]]
    seeds: dict[str, list[int]] = field(default_factory=dict)
    probed: dict[str, list[bool]] = field(default_factory=dict)
    reused: dict[str, int] = field(default_factory=dict)


def stages_of(on_gpu: bool, headline: str) -> list[str]:
    """The stages a device samples, the headline's first: a GPU's two clocks, a CPU's one."""
    if not on_gpu:
        return [Clock.HOST.value]
    both = [Clock.GPU.value, Clock.LATENCY.value]
    return both if headline != Clock.LATENCY.value else both[::-1]


def _ended(samples: dict[str, list[float]], rule: StopRule, started: float, cap: float) -> Optional[Ended]:
    """Why the stage stops now, if it does: its criterion met after the fewest samples, else a cap."""
    n = min(len(s) for s in samples.values())
    if n >= rule.min_samples and stopping.criterion(rule.criterion).met(samples, rule.target):
        return Ended.MET
    if n >= rule.max_samples:
        return Ended.SAMPLE_CAP
    if time.monotonic() - started >= cap:
        return Ended.TIME_CAP
    return None


def _calls(party: Party, rounds: int, rng: random.Random, probing: float) -> list[Call]:
    """`rounds` rounds of the party's entries, each round in its own random order; a `probing` share of
    each entry's calls (one at least, none where 0) at random places carry the stream-order probe."""
    calls: list[Call] = []
    for _ in range(rounds):
        order = list(party.entries)
        rng.shuffle(order)
        calls += [Call(name, rng.getrandbits(63)) for name in order]
    if probing:
        for name in party.entries:
            mine = [call for call in calls if call.entry == name]
            for call in rng.sample(mine, max(1, round(probing * len(mine)))):
                call.probe = True
    return calls


def _stage(parties: list[Party], stage: str, rule: StopRule, cap: float, rng: random.Random,
           reused: dict[str, int], probe_share: float) -> tuple[dict[str, Timing], dict[str, Taken], Optional[dict[str, Timing]]]:
    """One stage, batches of every party alternating: {entry: Timing} on the stage's clock, what each
    entry took, and on the latency stage the every-stream clock's timings too."""
    taken: dict[str, Taken] = {name: Taken() for party in parties for name in party.entries}
    overhead: dict[str, Overhead] = {}
    method: dict[str, str] = {}
    latency = stage == Clock.LATENCY.value
    started = time.monotonic()
    rounds = 5
    while True:
        batch_started = time.monotonic()
        order = list(parties)
        rng.shuffle(order)
        for party in order:
            calls = _calls(party, rounds, rng, probing=probe_share if stage == Clock.GPU.value else 0.0)
            got = party.batch(stage, calls)
            for name in party.entries:
                if got.overhead is not None:
                    overhead[name] = got.overhead
                method[name] = got.method or method.get(name, "")
                rows, mine = got.rows.get(name, []), [call for call in calls if call.entry == name]
                if len(rows) != len(mine):
                    raise ValueError(f"a batch of {len(mine)} calls of {name} came back with {len(rows)} samples")
                each = taken[name]
                each.samples += [row[0] for row in rows]
                each.submit += [row[-1] if latency else row[1] for row in rows]
                each.tails += [row[1] for row in rows] if latency else []
                each.probed += [call.probe for call in mine]
                each.seeds += [call.seed for call in mine]
            for name, count in got.reused.items():
                reused[name] = reused.get(name, 0) + count
        ended = _ended({name: each.samples for name, each in taken.items()}, rule, started, cap)
        if ended:
            break
        n = min(len(each.samples) for each in taken.values())
        per_round = (time.monotonic() - batch_started) / rounds
        short = rule.min_samples - n if n < rule.min_samples else MAX_ROUNDS
        rounds = max(1, min(rule.max_samples - n, int(BATCH_S / max(per_round, 1e-6)), MAX_ROUNDS, short))
    found = {name: summarize(each.samples, method[name], each.submit, overhead[name].call, clock=stage,
                             ended=ended.value) for name, each in taken.items()}
    whole = None
    if latency:
        whole = {}
        for name, each in taken.items():
            found[name].tail = statistics.median(each.tails)
            found[name].tail_overhead = overhead[name].tail
            whole[name] = summarize([a + b for a, b in zip(each.samples, each.tails)], method[name], each.submit,
                                    overhead[name].whole, clock=Clock.ALL_STREAMS.value, ended=ended.value)
    return found, taken, whole


def run(parties: list[Party], rule: StopRule, on_gpu: bool, probe_share: float = FAST.probe_share,
        rng: Optional[random.Random] = None) -> Sampling:
    """Every entry of every party on every clock the device has (`rule.second_clock`). The headline
    clock (`rule.clock`) samples first and gets the larger share of the cap; of the GPU-time stage's
    calls, a `probe_share` carry the stream-order probe."""
    rng = rng or random.SystemRandom()
    stages = stages_of(on_gpu, rule.clock)
    shares = [1.0] if len(stages) == 1 else [HEADLINE_SHARE, 1 - HEADLINE_SHARE]
    timed = Sampling({})
    for i, stage in enumerate(stages if rule.second_clock else stages[:1]):
        cap = rule.time_cap * shares[i]
        if i:  # reported beside the headline, never divided by it: a coarser interval does
            rule = dataclasses.replace(rule, target=rule.target * SECOND_COARSER, min_samples=rule.fewer_samples())
        found, taken, whole = _stage(parties, stage, rule, cap, rng, timed.reused, probe_share)
        timed.clocked[stage] = found
        if whole is not None:
            timed.clocked[Clock.ALL_STREAMS.value] = whole
        for name, each in taken.items():  # the re-check's record: every call that was observed
            timed.seeds.setdefault(name, []).extend(each.seeds)
            timed.probed.setdefault(name, []).extend(each.probed)
    return timed
