"""A sweep's figures per level, as KernelBench reports them: the correctness rate, fast_p
(the share of evaluations that are correct and more than p times faster) and the geometric
mean speedup of the correct ones; and fast_p counting only speedups whose 95% interval lies
above p. Pure functions of the records.

Records on a degenerate problem (SweepRecord.degenerate: its speedups measure nothing) are left out of
every figure and listed apart with their speedups (LevelSummary.degenerate), so a trainer drops them.

fast_p differs from KernelBench's in one way: a speedup counts as above p only beyond the
harness's resolution (RESOLUTION, 0.1%). A copy of the reference reads 1.0003x as often as
0.9997x, so KernelBench's count would give copies a fast_1 near 50% (40% over 100 level 1
copies on an H200) where the harness's is near 0."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

from ..engine.children import DEVICE_WAITS
from ..engine.timing.speedups import RESOLUTION
from ..results import speedup_text
from ..stats import geomean
from .jobs import COPY
from .records import NOT_EVALUATED, PROBLEM_ERROR, SKIPPED, SweepRecord

P_VALUES = (0.0, 1.0, 1.5, 2.0)
# the phases after the build, on the device: together a candidate's device side
DEVICE_PHASES = ("start", "check", "time", "shapes")
# the time phase's steps (SweepRecord.time_split), as the seconds table names them
TIME_STEPS = {"beside": "beside the reference", "recheck": "re-check of its outputs", "alone": "the reference alone"}


@dataclass
class Seconds:
    """Where a level's candidates spent their seconds, medians a candidate, from the phases each
    record carries. A phase holds its waits for the device too: in a sweep a timing waits for the
    previous problem's other shapes and for the device's lock, which the next problem's load takes too
    (device_waits), so the candidates' device sides add up to more than the sweep's wall."""

    candidates: int  # records with a device side (evaluated past their build)
    device: float  # start + check + time + shapes, median
    device_mean: float
    phases: dict[str, float]  # median by phase, the build's too (0 for a cached one)
    time_steps: dict[str, float]  # the time phase's steps (TIME_STEPS), median, where recorded
    # a timing's waits for the device (DEVICE_WAITS), median, where recorded; part of the time phase
    device_waits: dict[str, float] = field(default_factory=dict)


def seconds_of(records: list[SweepRecord]) -> Optional[Seconds]:
    """The medians over the records that reached the device; None where none did."""
    reached = [r for r in records if any(p in r.phases for p in DEVICE_PHASES)]
    if not reached:
        return None
    sides = [sum(r.phases.get(p, 0.0) for p in DEVICE_PHASES) for r in reached]

    def medians(names: tuple[str, ...], of) -> dict[str, float]:
        found = {name: [of(r)[name] for r in reached if name in of(r)] for name in names}
        return {name: statistics.median(values) for name, values in found.items() if values}

    return Seconds(len(reached), statistics.median(sides), statistics.mean(sides),
                   medians(("build", *DEVICE_PHASES), lambda r: r.phases),
                   medians(tuple(TIME_STEPS), lambda r: r.time_split), medians(DEVICE_WAITS, lambda r: r.waits))


@dataclass
class Apart:
    """A record on a degenerate problem, left out of its level's figures."""

    problem: str
    candidate: str
    verdict: str
    speedup: Optional[float]
    interval: Optional[list[float]]
    degenerate: str  # SweepRecord.degenerate

    @property
    def text(self) -> str:
        speedup = f" {speedup_text(self.speedup, self.interval)}" if self.speedup is not None else ""
        return f"{self.problem} ({self.candidate}): {self.verdict}{speedup}, {self.degenerate}"


def counted(records: list[SweepRecord]) -> list[SweepRecord]:
    """The evaluations a level's figures count: its problems loaded, none degenerate."""
    return [r for r in records if r.verdict not in NOT_EVALUATED and not r.degenerate]


@dataclass
class LevelSummary:
    level: str
    evaluations: int  # of problems that loaded
    correct: int
    correctness: float
    fast_p: dict[str, float]  # by p as text ("1.5"), over eager
    fast_p_compile: Optional[dict[str, float]]  # over torch.compile; None where it was not timed
    geomean_speedup: Optional[float]  # of the correct candidates, over eager
    broken_problems: list[str] = field(default_factory=list)  # problem files that failed themselves
    failures: dict[str, int] = field(default_factory=dict)  # by verdict
    fast_p_sure: dict[str, float] = field(default_factory=dict)  # over eager, the interval above p
    skipped: list[str] = field(default_factory=list)  # under --backward, problems whose outputs have no gradient
    clock: str = ""  # the clock of fast_p (SweepRecord.clock), "" where records from before name none
    # fast_p over eager on the other clock (SweepRecord.speedup_second); None where none was measured
    fast_p_second: Optional[dict[str, float]] = None
    second_clock: str = ""
    seconds: Optional[Seconds] = None  # where its candidates' seconds went
    degenerate: list[Apart] = field(default_factory=list)  # left out of every figure above


def fast_p(speedups: list[Optional[float]], p: float) -> float:
    """The share of evaluations (None: not correct) more than p times faster, beyond RESOLUTION; fast_0 is
    the correctness rate."""
    return sum(1 for s in speedups if s is not None and s > p * (1 + RESOLUTION)) / len(speedups) if speedups else 0.0


def fast_p_sure(records: list[SweepRecord], p: float) -> float:
    """The share of evaluations correct and faster than p beyond doubt: their interval's low end
    above p (an evaluation without an interval counts by its speedup)."""
    def sure(r: SweepRecord) -> bool:
        low = r.interval[0] if r.interval else r.speedup
        return r.correct and low is not None and low > p
    return sum(1 for r in records if sure(r)) / len(records) if records else 0.0


def summarize_level(level: str, records: list[SweepRecord]) -> LevelSummary:
    evaluated = counted(records)
    eager = [r.speedup if r.correct else None for r in evaluated]
    compiled = [r.speedup_compile if r.correct else None for r in evaluated]
    timed_compile = any(r.speedup_compile is not None for r in evaluated)
    failures: dict[str, int] = {}
    for r in evaluated:
        if not r.correct:
            failures[r.verdict] = failures.get(r.verdict, 0) + 1
    correct = sum(1 for r in evaluated if r.correct)
    second = [r.speedup_second if r.correct else None for r in evaluated]
    seconds = {r.second_clock for r in evaluated if r.correct and r.second_clock}
    return LevelSummary(
        level, len(evaluated), correct, correct / len(evaluated) if evaluated else 0.0,
        {f"{p:g}": fast_p(eager, p) for p in P_VALUES},
        {f"{p:g}": fast_p(compiled, p) for p in P_VALUES} if timed_compile else None,
        geomean([s for s in eager if s is not None]),
        sorted({r.problem for r in records if r.verdict == PROBLEM_ERROR}), failures,
        {f"{p:g}": fast_p_sure(evaluated, p) for p in P_VALUES},
        sorted({r.problem for r in records if r.verdict == SKIPPED}),
        "/".join(sorted({r.clock for r in evaluated if r.correct and r.clock})),
        {f"{p:g}": fast_p(second, p) for p in P_VALUES} if seconds else None, "/".join(sorted(seconds)),
        seconds_of(evaluated),
        [Apart(r.problem, r.candidate, r.verdict, r.speedup if r.correct else None, r.interval if r.correct else None,
               r.degenerate) for r in records if r.degenerate and r.verdict not in NOT_EVALUATED])


def summarize(records: list[SweepRecord]) -> list[LevelSummary]:
    """One summary per level, in the order the levels first appear."""
    levels: dict[str, list[SweepRecord]] = {}
    for record in records:
        levels.setdefault(record.level, []).append(record)
    return [summarize_level(level, rs) for level, rs in levels.items()]


@dataclass
class CopyCheck:
    """What a sweep's copies say of the harness itself. A copy is its problem's own Model, so it must
    read `correct`, and its speedup like for like (over eager at full precision: `speedup_ieee` where
    PyTorch's defaults changed the reference, else `speedup`) must have an interval that holds 1.0."""

    copies: int  # copies evaluated
    wrong: list[str]  # "level/problem: verdict" of each copy not read correct
    outside: list[str]  # "level/problem: speedup [low-high]" of each correct copy whose interval leaves out 1.0
    # "level/problem" of each copy with a trial whose outputs reached the reference other than summed (read again)
    read_again: list[str] = field(default_factory=list)


def copy_check(records: list[SweepRecord]) -> Optional[CopyCheck]:
    """The copies' check; None where the sweep evaluated no copy."""
    copies = [r for r in records if r.candidate == COPY and r.verdict not in NOT_EVALUATED]
    if not copies:
        return None
    outside = []
    for r in copies:
        speedup, interval = (r.speedup_ieee, r.interval_ieee) if r.speedup_ieee is not None else (r.speedup, r.interval)
        if r.correct and speedup is not None and interval and not interval[0] <= 1.0 <= interval[1]:
            outside.append(f"{r.level}/{r.problem}: {speedup:.4f}x [{interval[0]:.4f}-{interval[1]:.4f}]")
    return CopyCheck(len(copies), [f"{r.level}/{r.problem}: {r.verdict}" for r in copies if not r.correct], outside,
                     [f"{r.level}/{r.problem}" for r in copies if r.read_again])


def copy_sentences(check: CopyCheck) -> list[tuple[str, str]]:
    """The check in sentences, each with its tone: "wrong" (copies read other than correct), "miss"
    (intervals that leave out 1.0), "again" (trials run again, their outputs lost on the way) or "fine"."""
    said = []
    if check.wrong:
        said.append((f"{len(check.wrong)} of {check.copies} copies read other than correct ({'; '.join(check.wrong)}). "
                     "A copy is its problem's own Model, so unless the problem's outputs differ from one process to "
                     "another, that verdict is the harness's error. The record's explanation says what differed.",
                     "wrong"))
    if check.outside:
        said.append((f"{len(check.outside)} of {check.copies - len(check.wrong)} correct copies "
                     f"{'has' if len(check.outside) == 1 else 'have'} a like-for-like "
                     f"interval (over eager at full precision) that leaves out 1.0 ({'; '.join(check.outside)}). A "
                     "95% interval misses now and then by chance; a copy that misses again is the harness's error.",
                     "miss"))
    if check.read_again:
        said.append((f"{len(check.read_again)} of {check.copies} copies had a trial whose outputs reached the reference "
                     f"process other than their worker summed them, run again ({'; '.join(check.read_again)}). A "
                     "copy's outputs do not change after its forward returns, so each is a transfer the harness lost "
                     "on the way and caught.", "again"))
    if said:
        return said
    return [(f"All {check.copies} copies read correct, and every like-for-like interval (over eager at full "
             "precision) holds 1.0." if check.copies > 1 else "The copy read correct, and its like-for-like interval "
             "(over eager at full precision) holds 1.0.", "fine")]


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def summary_rows(summaries: list[LevelSummary]) -> tuple[list[str], list[list[str]]]:
    """The per-level table every view prints (the terminal, the HTML page): headers, then rows. fast_p
    on the headline's clock first, then torch.compile's and the other clock's where measured."""
    compiled = any(s.fast_p_compile for s in summaries)
    seconds = sorted({s.second_clock for s in summaries if s.fast_p_second})
    clock = "/".join(sorted({s.clock for s in summaries if s.clock}))
    headers = ["level", "n", "correct", f"{clock}: fast_1" if clock else "fast_1", "fast_1.5", "fast_2",
               "sure fast_1", "geomean"] + (["compile: fast_1", "fast_1.5", "fast_2"] if compiled else []) + \
        ([f"{'/'.join(seconds)}: fast_1", "fast_1.5", "fast_2"] if seconds else [])
    rows = []
    for s in summaries:
        row = [s.level, str(s.evaluations), _percent(s.correctness)] + \
              [_percent(s.fast_p[p]) for p in ("1", "1.5", "2")] + \
              [_percent(s.fast_p_sure["1"]) if s.fast_p_sure else "-",
               f"{s.geomean_speedup:.2f}x" if s.geomean_speedup else "-"]
        for shown, share in ((compiled, s.fast_p_compile), (seconds, s.fast_p_second)):
            if shown:
                row += [_percent(share[p]) if share else "-" for p in ("1", "1.5", "2")]
        rows.append(row)
    return headers, rows


def seconds_rows(summaries: list[LevelSummary]) -> tuple[list[str], list[list[str]]]:
    """Where each level's seconds went, medians a candidate, a column a level (levels none of whose
    candidates reached the device have none): headers, then a row a figure."""
    levels = [s for s in summaries if s.seconds is not None]
    if not levels:
        return [], []

    def row(label: str, figure) -> list[str]:
        values = [figure(s.seconds) for s in levels]
        return [label, *("-" if v is None else f"{v:.2f}" for v in values)]

    rows = [["candidates", *(str(s.seconds.candidates) for s in levels)],
            row("device side: start + check + time + shapes", lambda sec: sec.device),
            row("  its mean", lambda sec: sec.device_mean)]
    for phase in (*DEVICE_PHASES, "build"):
        rows.append(row(phase, lambda sec: sec.phases.get(phase)))
        if phase == "time":
            rows += [row(f"  {label}", lambda sec: sec.time_steps.get(step)) for step, label in TIME_STEPS.items()]
            rows += [row(f"  {wait}", lambda sec: sec.device_waits.get(wait)) for wait in DEVICE_WAITS
                     if any(wait in s.seconds.device_waits for s in levels)]
    return ["", *(s.level for s in levels)], rows


P_MAX, P_STEPS = 3.0, 121  # the curves' p from 0 to P_MAX


@dataclass
class Curve:
    """fast_p against p for one level: against eager ("eager"), counting only speedups whose 95%
    interval is above p ("sure"), or against torch.compile ("compile")."""

    level: str
    kind: str
    label: str
    points: list[tuple[float, float]]


def fast_p_curves(records: list[SweepRecord]) -> list[Curve]:
    """Each level's curves, levels in name order; a level of broken problems only has none (no share to draw,
    rather than a share of 0); the torch.compile curve only where it was timed."""
    ps = [P_MAX * i / (P_STEPS - 1) for i in range(P_STEPS)]
    curves = []
    for level in sorted({r.level for r in records}):
        evaluated = counted([r for r in records if r.level == level])
        if not evaluated:
            continue
        eager = [r.speedup if r.correct else None for r in evaluated]
        curves.append(Curve(level, "eager", f"{level} vs eager", [(p, fast_p(eager, p)) for p in ps]))
        curves.append(Curve(level, "sure", f"{level} vs eager, the 95% interval above p",
                            [(p, fast_p_sure(evaluated, p)) for p in ps]))
        compiled = [r.speedup_compile if r.correct else None for r in evaluated]
        if any(s is not None for s in compiled):
            curves.append(Curve(level, "compile", f"{level} vs torch.compile", [(p, fast_p(compiled, p)) for p in ps]))
    return curves
