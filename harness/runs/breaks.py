"""A run's breaks (`harness run --red-team`): each candidate the fast verdict passed at the acceptable speedup
or more and the audit did not, kept in the run as a case of its own, and written out as test cases
(`harness breaks RUN --into DIR`).

    runs/<id>/breaks/001/          round 1's break (breaks/001-2/: its second sample's)
      break.json                   the record: run, round, sample, problem, device, the audit's opinion
      <problem>.py                 the problem file as the run had it
      candidate.py                 the candidate
      fast.json  audit.json        the two verdicts: the fast one and the audit's (results.EvalResult)
"""
from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..engine.findings import (BelowFloor, HiddenWork, IncorrectAtShapes, LowerPrecision, ReusedOutputs,
                               SlowedReference, StreamOrder, TimedOutputsDiffer, TrialFailed)
from ..errors import HarnessError
from ..integrity.refusals import REFUSALS
from ..files import write_atomic
from ..results import EvalResult, Verdict, from_json, speedup_text, to_json
from .records import Audit
from .store import CANDIDATE_FILE, RunStore

BREAKS_DIR = "breaks"
BREAK_FILE = "break.json"
FAST_FILE = "fast.json"
AUDIT_FILE = "audit.json"

# The invariant an audit's finding (verdicts.judged's "finding") stands for in a case file's header, and a
# fragment of the sentence its verdict says whatever the figures: what the case expects.
INVARIANTS: dict[str, tuple[str, str]] = {
    LowerPrecision.__name__: ("precision", "further from the reference computed in float64"),
    TrialFailed.__name__: ("correctness", "differs from the reference"),
    StreamOrder.__name__: ("stream-order", "stream order is part of an op's contract"),
    TimedOutputsDiffer.__name__: ("checked-calls", "while being timed"),
    ReusedOutputs.__name__: ("fresh-outputs", "in the memory of an earlier call's outputs"),
    HiddenWork.__name__: ("hidden-work", "the timed window missed that work"),
    SlowedReference.__name__: ("reference-alone", "slowed the reference down"),
    BelowFloor.__name__: ("physical-floor", "below the physical floor"),
    IncorrectAtShapes.__name__: ("shapes", "other shape(s)"),
}
# A disagreement without a finding where the audit passed it too: it read the candidate slower beyond the noise.
TIMING = "timing"


class BreaksError(HarnessError):
    """A run's breaks that cannot be read or written; one paragraph for a person."""


@dataclass
class Break:
    """What broke the judge, as break.json keeps it."""

    run: str
    round: int
    sample: int  # 0-based
    problem: str  # the problem file's path when the run started
    sha256: str  # the problem's, so that a case finds the same file again
    device: str  # cpu or cuda
    speedup: Optional[float]  # the fast verdict's
    interval: Optional[list[float]]
    audit: Audit

    @property
    def invariant(self) -> str:
        """The invariant that caught it, by name."""
        return invariant(self.audit.finding, self.audit.verdict)

    @property
    def expect(self) -> tuple[str, str]:
        """The verdict the judge at its strictest gives it, and a fragment of its sentence."""
        fragment = INVARIANTS.get(self.audit.finding, ("", ""))[1]
        return self.audit.verdict, fragment or Verdict(self.audit.verdict).sentence.rstrip(".")


def evidence(result: EvalResult) -> str:
    """What a failed verdict rests on: the finding verdicts.judged names, else the runtime guard that refused it
    (integrity/refusals.py); "" for neither."""
    found = result.details.get("finding") or next((r.name for r in REFUSALS if r.name in result.details), "")
    return str(found)


def invariant(found: str, verdict: str) -> str:
    """The invariant that `found` (evidence()) stands for, by name: INVARIANTS's, else its own name in words;
    without evidence, TIMING for a verdict that passed, else the verdict's name."""
    if found in INVARIANTS:
        return INVARIANTS[found][0]
    if found:
        return re.sub(r"(?<!^)(?=[A-Z])", "-", found).replace("_", "-").lower()
    return TIMING if verdict == Verdict.CORRECT.value else verdict


def folder(store: RunStore, n: int, sample: int) -> Path:
    return store.path / BREAKS_DIR / (f"{n:03d}" if sample == 0 else f"{n:03d}-{sample + 1}")


def keep(store: RunStore, found: Break, problem: Path, candidate: Path, fast: EvalResult,
         audited: EvalResult) -> Path:
    """A break's folder in the run, written whole: the record, the problem, the candidate and both verdicts."""
    where = folder(store, found.round, found.sample)
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(problem, where / problem.name)
    shutil.copyfile(candidate, where / CANDIDATE_FILE)
    write_atomic(where / FAST_FILE, to_json(fast))
    write_atomic(where / AUDIT_FILE, to_json(audited))
    write_atomic(where / BREAK_FILE, to_json(found))  # last: a folder without it was cut short
    return where


def read(store: RunStore) -> list[tuple[Path, Break]]:
    """The run's breaks, in the order of their rounds, each with its folder."""
    found = []
    for where in sorted((store.path / BREAKS_DIR).glob("*/")):
        if not (where / BREAK_FILE).is_file():
            continue
        try:
            found.append((where, from_json(Break, (where / BREAK_FILE).read_text())))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise BreaksError(f"Break file {where / BREAK_FILE} cannot be read as a run wrote it: {exc}.") from None
    return found


def line(found: Break) -> str:
    """A break in one line for a person."""
    fast = speedup_text(found.speedup, found.interval)
    return (f"round {found.round}" + (f" sample {found.sample + 1}" if found.sample else "")
            + f": the fast verdict passed it at {fast}; the audit's {found.audit.check}: {found.audit.why}")


def case_text(found: Break, candidate: str, problem: str) -> str:
    """A break as a case of tests/adversarial: the header (the invariant that caught it, its problem and device,
    the verdict the judge must give and a fragment of its sentence), then the candidate as it was."""
    verdict, fragment = found.expect
    return (f"# invariant: {found.invariant}\n# problem: {problem}\n# device: {found.device}\n"
            f'# expect: {verdict} "{fragment}"\n'
            f"# Found by harness run --red-team, run {found.run}: {line(found)}\n{candidate}")


def write_cases(store: RunStore, into: Path) -> list[Path]:
    """Each break of the run as a case file in `into`, named for its invariant, problem, run and round. A case
    names its problem where the run found it, relative to the current directory where it lies under it; where
    that file is gone or changed, the break's copy is written to `into`/problems/ and named instead."""
    written = []
    for where, found in read(store):
        original = Path(found.problem)
        problem = original.absolute()
        if not problem.is_file() or hashlib.sha256(problem.read_text().encode()).hexdigest() != found.sha256:
            problem = (into / "problems" / f"{original.stem}-{found.sha256[:8]}.py").absolute()
            problem.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(where / original.name, problem)
        named = problem.relative_to(Path.cwd()) if problem.is_relative_to(Path.cwd()) else problem
        name = f"{found.invariant}_{original.stem}_{found.run.rsplit('-', 1)[-1]}_r{found.round}" + (
            f"s{found.sample + 1}" if found.sample else "")
        case = into / (re.sub(r"[^A-Za-z0-9_]", "_", name) + ".py")
        into.mkdir(parents=True, exist_ok=True)
        write_atomic(case, case_text(found, (where / CANDIDATE_FILE).read_text(), str(named)))
        written.append(case)
    return written
