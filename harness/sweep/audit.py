"""A second opinion on verdicts already given: each candidate judged again in processes of the audit's own,
with every invariant at its strictest (options.AUDIT: every timed call under the stream-order probe, a
per-stream trace of every timing, float64 on every trial and three times the trials, a trial on each other
input distribution, ten times the checked calls), and its verdict and figure held against the first.

A record agrees where both verdicts are failures, or both are `correct` and the first figure does not stand
above the audit's beyond both intervals. It disagrees where the audit fails a candidate the fast verdict
passed (naming the check that caught it), passes one the fast verdict failed, or reads it slower beyond
the noise. A trainer audits the rewards it paid (Judge.audit); `harness audit` audits a result, a run or a
sweep, and `harness run --red-team` keeps the candidates the fast verdict passed and the audit did not."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..engine.evaluate import Evaluator
from ..engine.options import EvalOptions
from ..errors import HarnessError
from ..files import write_atomic
from ..problem import ProblemError
from ..results import EvalResult, Verdict, from_dict, speedup_text, to_dict
from ..runs.history import load, load_rounds
from ..runs.store import CANDIDATE_FILE
from .jobs import SOURCE_FILE, SweepSource
from .records import RESULTS_FILE, read_records

# The check that caught what the fast verdict missed, by what the audit found (verdicts.judged's "finding")
CHECKS = {
    "StreamOrder": "stream order (every check trial and timed call probed)",
    "TimedOutputsDiffer": "timed outputs (ten times the checked calls)",
    "HiddenWork": "per-stream trace (every timing traced)",
    "LowerPrecision": "precision (float64 on every trial)",
    "ReusedOutputs": "fresh outputs",
    "TrialFailed": "more trials on fresh inputs",
    "SlowedReference": "the reference beside the candidate against it alone",
    "BelowFloor": "the physical floor",
    "IncorrectAtShapes": "other shapes",
    "IncorrectOnInputs": "other input distributions (each trial's inputs scaled, shifted or zeroed)",
}
REPEAT = "the evaluation repeated in new processes"
AUDIT_FILE = "audit.json"  # beside what was audited: a run's or a sweep's folder, or a result file's


class AuditError(HarnessError):
    """A target that cannot be audited; the message is one paragraph for a person."""


@dataclass
class AuditItem:
    """One verdict to audit: the candidate, its problem, and what the fast verdict gave it."""

    label: str
    problem: Path
    candidate: Path
    verdict: str
    speedup: Optional[float] = None
    interval: Optional[list[float]] = None
    seconds: Optional[float] = None  # what the fast verdict took past its build, where known (past_build)


@dataclass
class AuditRecord:
    """An audited verdict: `agree`, or the `check` that disagrees and `why` in one sentence."""

    label: str
    problem: str
    candidate: str
    agree: bool
    check: str
    why: str
    fast_verdict: str
    fast_speedup: Optional[float]
    fast_interval: Optional[list[float]]
    audit_verdict: str
    audit_speedup: Optional[float]
    audit_interval: Optional[list[float]]
    fast_seconds: Optional[float]
    audit_seconds: float

    @property
    def line(self) -> str:
        """One line for a person: the label, then agree or disagree with the check and figures."""
        fast = _figure(self.fast_verdict, self.fast_speedup, self.fast_interval)
        audited = _figure(self.audit_verdict, self.audit_speedup, self.audit_interval)
        if self.agree:
            return f"agree     {self.label}: {fast}; audit {audited}"
        return f"disagree  {self.label}: {fast}; audit {audited}: {self.check}: {self.why}"


def compared(item: AuditItem, result: EvalResult, seconds: float) -> AuditRecord:
    """The audit's `result` held against the fast verdict of `item`."""
    fast_ok = item.verdict == Verdict.CORRECT.value
    agree, check, why = True, "", ""
    if fast_ok and result.verdict is not Verdict.CORRECT:
        agree = False
        check = CHECKS.get(result.details.get("finding", ""), f"the audit's {result.verdict.value}")
        why = result.explanation.removeprefix(result.verdict.sentence).strip().split("\n")[0][:300]
    elif not fast_ok and result.verdict is Verdict.CORRECT:
        agree, check = False, REPEAT
        why = f"the fast verdict was {item.verdict}, and the audit found it correct"
    elif fast_ok and _above(item.interval or [item.speedup] * 2, result.speedup_interval or [result.speedup] * 2):
        agree, check = False, REPEAT
        why = (f"the fast figure {speedup_text(item.speedup, item.interval)} stands above the audit's "
               f"{speedup_text(result.speedup, result.speedup_interval)}, beyond both intervals")
    return AuditRecord(item.label, str(item.problem), str(item.candidate), agree, check, why, item.verdict,
                       item.speedup, item.interval, result.verdict.value, result.speedup, result.speedup_interval,
                       item.seconds, round(seconds, 3))


def past_build(phases: dict[str, float]) -> Optional[float]:
    """The seconds a verdict took past its build (which an audit of the same file finds cached): what the fast
    verdict's and the audit's costs compare on; None where no phase was recorded."""
    return round(sum(t for name, t in phases.items() if name != "build"), 3) if phases else None


def audit(items: Iterable[AuditItem], options: EvalOptions,
          on_record: Optional[Callable[[AuditRecord], None]] = None) -> list[AuditRecord]:
    """Each item judged again, problem by problem, in an Evaluator of the audit's own (a reference process
    and workers that never served the fast verdict), at the options audited."""
    strict = options.audited()
    by_problem: dict[Path, list[AuditItem]] = {}
    for item in items:
        by_problem.setdefault(Path(item.problem).resolve(), []).append(item)
    records: list[AuditRecord] = []

    def keep(record: AuditRecord) -> None:
        records.append(record)
        if on_record:
            on_record(record)

    for problem, group in by_problem.items():
        done = 0
        try:
            with Evaluator(problem, strict) as evaluator:
                for item in group:
                    result = evaluator.evaluate(item.candidate)
                    keep(compared(item, result, past_build(result.phase_seconds) or result.seconds))
                    done += 1
        except ProblemError as exc:  # the problem itself fails now: its verdicts cannot be audited
            for item in group[done:]:
                keep(AuditRecord(item.label, str(item.problem), str(item.candidate), False, "the problem", str(exc),
                                 item.verdict, item.speedup, item.interval, "problem_error", None, None,
                                 item.seconds, 0.0))
    return records


def _above(fast: list[Optional[float]], audited: list[Optional[float]]) -> bool:
    """Whether the fast interval lies wholly above the audit's."""
    return None not in fast and None not in audited and fast[0] > audited[1]


def _figure(verdict: str, speedup: Optional[float], interval: Optional[list[float]]) -> str:
    return verdict + (f" {speedup_text(speedup, interval)}" if speedup is not None else "")


def items_of(target: str, runs_dir: Path, scratch: Path, top: Optional[int] = None) -> tuple[list[AuditItem], Path]:
    """What `target` holds to audit, the `top` highest speedups first where given, and where its audit is
    written: a result file (harness eval --json: one result or a list), a sweep's results folder, or a run
    (its id, its folder, or `latest`: each round that has a candidate)."""
    path = Path(target)
    if path.is_file():
        items, out = _of_results(path), path.with_name(f"{path.stem}.{AUDIT_FILE}")
    elif (path / RESULTS_FILE).is_file():
        items, out = _of_sweep(path, scratch), path / AUDIT_FILE
    else:
        items, out = _of_run(target, runs_dir)
    items.sort(key=lambda item: (item.verdict != Verdict.CORRECT.value, -(item.speedup or 0.0)))
    return (items[:top] if top else items), out


def write(records: list[AuditRecord], path: Path) -> None:
    write_atomic(path, json.dumps([to_dict(r) for r in records], indent=2))


def _of_results(path: Path) -> list[AuditItem]:
    try:
        found = json.loads(path.read_text())
        results = [from_dict(EvalResult, r) for r in (found if isinstance(found, list) else [found])]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AuditError(f"Result file {path} cannot be read as harness eval --json wrote it: {exc}.") from None
    missing = [r for r in results if not (r.problem and r.candidate)]
    if missing:
        raise AuditError(f"Result file {path} names no problem or candidate file for {len(missing)} result(s): "
                         "audit a file that harness eval --json wrote.")
    return [AuditItem(Path(r.candidate).name, Path(r.problem), Path(r.candidate), r.verdict.value, r.speedup,
                      r.speedup_interval, past_build(r.phase_seconds)) for r in results]


def _of_sweep(folder: Path, scratch: Path) -> list[AuditItem]:
    records = read_records(folder / RESULTS_FILE)
    jobs = {job.key: job for job in SweepSource.read(folder).jobs(scratch)}
    lost = [r for r in records if r.key not in jobs]
    if lost:
        raise AuditError(f"Sweep folder {folder}: {len(lost)} record(s) name candidates its {SOURCE_FILE} no longer "
                         f"finds (the first: {'/'.join(lost[0].key)}); the files moved since it ran.")
    return [AuditItem("/".join(r.key), jobs[r.key].problem, jobs[r.key].candidate, r.verdict, r.speedup, r.interval,
                      past_build(r.phases)) for r in records]


def _of_run(run: str, runs_dir: Path) -> tuple[list[AuditItem], Path]:
    store, record = load(run, runs_dir)
    rounds, _ = load_rounds(store)
    problem = Path(record.problem.path)
    if not problem.is_file():
        raise AuditError(f"Run {store.path} was of problem {problem}, which is no longer there.")
    items = [AuditItem(f"{store.id} round {rnd.n}", problem, store.round_dir(rnd.n, rnd.chosen) / CANDIDATE_FILE,
                       rnd.eval.verdict.value, rnd.eval.speedup, rnd.eval.speedup_interval,
                       past_build(rnd.eval.phase_seconds))
             for rnd in rounds if (store.round_dir(rnd.n, rnd.chosen) / CANDIDATE_FILE).is_file()]
    return items, store.path / AUDIT_FILE
