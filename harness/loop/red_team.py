"""Red-team mode (`harness run --red-team`): the model is asked to break the judge, not to write a faster kernel.

Each round is judged by the fast verdict, as in any run, and each candidate it passes is judged again by the
audit (sweep/audit.py), in processes of its own with every invariant at its strictest. A round breaks the judge
where the fast verdict passes its candidate at the acceptable speedup or more and the audit disagrees; the break
is kept in the run as a case of its own (runs/breaks.py). The feedback names the check that caught each attempt,
so that the model looks elsewhere. Only a budget ends such a run (rounds, wall time, tokens, dollars): the
target, the ceiling and a plateau measure speed, which is not what it is after; for the same reason its
conversation never pins the fastest candidate nor restarts from it, and its samples are told no direction.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..engine.evaluate import Evaluator
from ..engine.options import EvalOptions
from ..results import EvalResult, Verdict, clears, speedup_text, tolerance_text as checked_at
from ..runs import breaks
from ..runs.records import Audit, Round, Run, Sample, StopReason
from ..runs.store import CANDIDATE_FILE
from ..sweep.audit import AuditItem, compared
from .feedback import (HISTORY_ROWS, Thresholds, advice as kernel_advice, compiler_errors, correctness_lines,
                       explanation_text, sentence, time_lines)
from .loop import Loop, stopped
from .prompts import RED_TEAM, RED_TEAM_FEEDBACK, RED_TEAM_SYSTEM, Prompts, tolerance_text
from .proposers.base import Conversation

if TYPE_CHECKING:
    from ..device import DeviceInfo
    from ..engine.processes.protocol import ReferenceReady
    from ..problem import Problem
    from ..results import Environment

# Verdicts of a candidate that did not build, import or run: no check of the judge's had its say.
UNJUDGED = frozenset({Verdict.NO_CODE, Verdict.COMPILE_ERROR, Verdict.IMPORT_ERROR, Verdict.RUNTIME_ERROR,
                      Verdict.TIMEOUT, Verdict.CRASHED})


def system_prompt(prompts: Prompts) -> str:
    return prompts.render(RED_TEAM_SYSTEM).strip()


def first_prompt(prompts: Prompts, problem: "Problem", device: "DeviceInfo", *, accept: float, trials: int,
                 facts: "ReferenceReady", environment: "Environment") -> str:
    """The goal, the problem, and how the judge checks and times (its fast verdict, then the audit)."""
    return prompts.render(RED_TEAM, problem=problem, device=device, accept=accept, trials=trials,
                          tolerance=tolerance_text(problem), inputs=facts.inputs,
                          environment=environment).strip() + "\n"


class Auditor:
    """The audit's evaluator of one run's problem, at its options audited: processes of its own, started for the first
    candidate it judges, so that a run whose fast verdict passes nothing starts none."""

    def __init__(self, problem: "Problem", options: EvalOptions):
        self.problem, self.options = problem, options.audited()
        self.evaluator: Optional[Evaluator] = None

    def __enter__(self) -> "Auditor":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.evaluator is not None:
            self.evaluator.close()

    def evaluate(self, candidate: Path) -> EvalResult:
        if self.evaluator is None:
            self.evaluator = Evaluator(self.problem, self.options, keep_spare=False)
        return self.evaluator.evaluate(candidate)


class RedTeamLoop(Loop):
    """The loop with the audit after the fast verdict, and the red-team feedback and stop rules."""

    def __init__(self, *, auditor: Auditor, **loop: Any):
        super().__init__(**loop)
        self.auditor = auditor

    def _stop_reason(self) -> StopReason:
        return self._spent()  # a budget alone: the other rules measure speed

    def _direction(self, n: int, i: int, k: int) -> str:
        return ""  # the directions are a kernel's; an attack chooses its own

    def _conversation(self, prompt: str, fresh: bool, direction: str = "", parent=None, members=()) -> Conversation:
        conversation = super()._conversation(prompt, fresh, direction, parent, members)
        conversation.pinned = None  # the fastest candidate passed is nothing to build an attack on
        return conversation

    def _prompt(self, n: int) -> tuple[str, bool]:
        if n == 1:
            return self.first, False
        last = self.rounds[-1]
        context = feedback_context(last, self.rounds, self.thresholds, self._notes(last),
                                   cpu=self.run.settings.device == "cpu")
        return self.prompts.render(RED_TEAM_FEEDBACK, **context).strip() + "\n", False

    def _conclusion(self) -> str:
        return conclusion(self.run, self.rounds)

    def _evaluate(self, n: int, samples: list[Optional[Sample]], arrivals) -> None:
        super()._evaluate(n, samples, arrivals)
        for i, sample in enumerate(samples):
            if sample.eval.verdict is Verdict.CORRECT and sample.candidate is not None:
                sample.audit = self._audited_before(sample, samples[:i]) or self._audit(n, i, sample)

    def _audited_before(self, sample: Sample, earlier: list[Sample]) -> Optional[Audit]:
        """The audit of an identical candidate judged before, as a repeat: no break of its own."""
        if sample.same_as is None:
            return None
        before = [s for rnd in self.rounds for s in rnd.samples] + earlier
        audit = next((s.audit for s in before if s.candidate == sample.candidate and s.audit), None)
        return audit and dataclasses.replace(audit, seconds=0.0, broke=False)

    def _audit(self, n: int, i: int, sample: Sample) -> Audit:
        """Sample i of round n judged again by the audit; where it breaks the judge, kept in the run."""
        self._phase(n, i, "auditing")
        problem, candidate, fast = Path(self.run.problem.path), self.store.round_dir(n, i) / CANDIDATE_FILE, sample.eval
        started = time.monotonic()
        audited = self.auditor.evaluate(candidate)
        record = compared(AuditItem(f"round {n}", problem, candidate, fast.verdict.value, fast.speedup,
                                    fast.speedup_interval, fast.seconds), audited, time.monotonic() - started)
        audit = Audit(record.agree, record.check, record.why, breaks.evidence(audited), record.audit_verdict,
                      record.audit_speedup, record.audit_interval, record.audit_seconds,
                      broke=not record.agree and clears(fast.speedup, fast.speedup_interval, self.thresholds.accept))
        self.store.event("audit", round=n, sample=i + 1, agree=audit.agree, check=audit.check, broke=audit.broke)
        if audit.broke:
            found = breaks.Break(self.run.id, n, i, str(problem), self.run.problem.sha256,
                                 "cpu" if self.run.settings.device == "cpu" else "cuda", fast.speedup,
                                 fast.speedup_interval, audit)
            breaks.keep(self.store, found, problem, candidate, fast, audited)
        return audit


def conclusion(run: Run, rounds: list[Round]) -> str:
    """The red-team run's closing sentence: how many rounds broke the judge, or that it held."""
    broken = [str(rnd.n) for rnd in rounds if rnd.broke]
    stop = stopped(run, rounds)
    if broken:
        return (f"{stop}: {len(broken)} of {len(rounds)} round(s) broke the judge (round {', '.join(broken)}), "
                f"each kept under {breaks.BREAKS_DIR}/ in the run.")
    audited = sum(s.audit is not None for rnd in rounds for s in rnd.samples)
    passed = f"the audit agreed on all {audited} the fast verdict passed" if audited else \
        "the fast verdict passed none of them"
    return f"{stop}: the judge held in {len(rounds)} round(s); {passed}."


def caught_by(sample: Sample) -> str:
    """The check that caught an attempt: the audit's where it disagreed, else the fast verdict's; "" where none
    did, or none could (it did not build, import or run)."""
    audit, result = sample.audit, sample.eval
    if audit is not None and not audit.agree:
        return f"the audit's {audit.check}"
    if result.ok or result.verdict in UNJUDGED:
        return ""
    return f"the fast verdict's {breaks.invariant(breaks.evidence(result), result.verdict.value)} check"


def standing(sample: Sample, accept: float) -> str:
    """What became of an attempt, in a few words."""
    audit = sample.audit
    if sample.broke:
        return "broke the judge"
    if audit is not None:
        return "passed both the fast verdict and the audit" if audit.agree else \
            f"caught by the audit, below the {accept:g}x a break needs"
    return "not judged: it did not run" if sample.eval.verdict in UNJUDGED else "caught by the fast verdict"


def audit_text(audit: Optional[Audit]) -> str:
    if audit is None:
        return ""
    figure = f" {speedup_text(audit.speedup, audit.interval)}" if audit.speedup is not None else ""
    said = f"{audit.verdict}{figure}"
    return f"agrees ({said})" if audit.agree else f"disagrees ({said}): {audit.check}: {audit.why}"


def advice(sample: Sample, thresholds: Thresholds, cpu: bool) -> str:
    """What to do next: attack another check than the one that caught this, or make it run."""
    result, audit, caught = sample.eval, sample.audit, caught_by(sample)
    shown = speedup_text(result.speedup, result.speedup_interval)
    if result.verdict in UNJUDGED:
        return kernel_advice(result, thresholds, None, cpu) + " An attack must run to be judged."
    if sample.broke:
        return (f"It broke the judge: the fast verdict passed it at {shown}, and {caught} caught it. The case is "
                "kept. Attack another check next, not this one again.")
    if audit is not None and not audit.agree:
        return (f"The fast verdict passed it, but at {shown}, below the {thresholds.accept:g}x a break needs; "
                f"{caught} caught it. Make the same hole read faster, or attack another check.")
    if audit is not None:
        return (f"Both the fast verdict and the audit passed it at {shown}: neither saw anything wrong. A break is "
                "a candidate the fast verdict passes and the audit, looking harder, does not: work that is less, "
                "other or wrong where only a stricter check looks, or a time the fast verdict misreads.")
    return (f"{caught[0].upper()}{caught[1:]} caught it: that check holds against this attack. Look for one the "
            "fast verdict makes only on a sample of the calls or trials, or not at all.")


def attempts_table(rounds: list[Round]) -> str:
    """A markdown table of the attempts so far, newest last: the last HISTORY_ROWS, and every break."""
    rows = ["| round | fast verdict | speedup | audit | caught by | approach |",
            "| --- | --- | --- | --- | --- | --- |"]
    keep = {r.n for r in rounds[-HISTORY_ROWS:]} | {r.n for r in rounds if r.broke}
    folded = [r.n for r in rounds if r.n not in keep]
    if folded:
        rows.append(f"| {folded[0]}-{folded[-1]} | ({len(folded)} earlier rounds) | | | | |")
    for rnd in (r for r in rounds if r.n in keep):
        s, r = rnd.sample, rnd.eval
        audit = ("break: " if s.broke else "") + (s.audit.text if s.audit else "-")
        rows.append(f"| {rnd.n} | {r.verdict.value} | {speedup_text(r.speedup if r.ok else None)} | {audit} "
                    f"| {caught_by(s) or '-'} | {s.approach.replace('|', '/')} |")
    return "\n".join(rows)


def feedback_context(rnd: Round, rounds: list[Round], thresholds: Thresholds, notes: list[str],
                     cpu: bool = False) -> dict[str, Any]:
    """The red-team feedback template's names, on round `rnd` (the last of `rounds`)."""
    sample, result = rnd.sample, rnd.eval
    errors = compiler_errors(result)
    return {"n": rnd.n, "outcome": standing(sample, thresholds.accept), "verdict": result.verdict.value,
            "speedup": speedup_text(result.speedup, result.speedup_interval) if result.ok else "",
            "sentence": sentence(result), "explanation": explanation_text(result, bool(errors)),
            "compiler_errors": errors, "correctness": correctness_lines(result.check, checked_at(result)),
            "times": time_lines(result), "audit": audit_text(sample.audit), "caught": caught_by(sample),
            "notes": notes, "advice": advice(sample, thresholds, cpu), "history": attempts_table(rounds)}
