"""The feedback after a round: what happened, what it measured, what to do next.

Pure: an EvalResult, the thresholds and the earlier rounds in, a template
context (and through the feedback template, text) out. Advice follows the
protocol the task is set in: below `accept` ask for a different strategy,
between `accept` and `target` keep going for the target.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..results import CheckResult, EvalResult, Verdict, speedup_text
from .prompts import FEEDBACK, Prompts

# Names of the two timings every correct result has.
CANDIDATE = "candidate"
REFERENCE = "reference"
# Rounds shown in the history table; older ones are summarised in one line.
HISTORY_ROWS = 12


@dataclass
class Thresholds:
    accept: float = 1.5
    target: float = 2.0

    def reached(self, result: EvalResult) -> bool:
        return result.ok and result.speedup is not None and result.speedup >= self.target


def correctness_lines(check: Optional[CheckResult]) -> list[str]:
    if check is None:
        return []
    if check.passed:
        return [f"matched the reference on {check.trials} trial(s); max abs error "
                f"{check.max_abs_error:.3g}, max rel error {check.max_rel_error:.3g}"]
    lines = list(check.reasons)
    if check.failed_trial is not None:
        lines.append(f"failed on trial {check.failed_trial}")
    if check.max_abs_error or check.max_rel_error:
        lines.append(f"max abs error {check.max_abs_error:.3g}, max rel error {check.max_rel_error:.3g}")
    if not check.reasons:  # the reasons already say where and how much
        if check.mismatch_share:
            lines.append(f"{check.mismatch_share:.2%} of elements outside tolerance")
        if check.first_bad_index is not None:
            lines.append(f"first mismatching element at index {tuple(check.first_bad_index)}")
    return lines


def compiler_errors(result: EvalResult) -> list[str]:
    """The build's first errors, each error (a line naming it and what follows) once:
    build logs repeat the compiler's output when the failure is re-raised."""
    if result.build is None or result.build.ok:
        return []
    groups: list[list[str]] = []
    for line in result.build.first_errors:
        if "error" in line.lower() or not groups:
            groups.append([line])
        else:
            groups[-1].append(line)
    seen, lines = set(), []
    for group in groups:
        if tuple(group) not in seen:
            seen.add(tuple(group))
            lines.extend(group)
    return lines


def time_lines(result: EvalResult) -> list[str]:
    lines = []
    for name, t in result.timings.items():
        # on a GPU the host's time to launch is in the window; a model can shorten it too
        submit = f"; host submit {t.submit_median:.2g} ms" if t.on_gpu and t.submit_median else ""
        lines.append(f"{name}: {t.median:.4g} ms (IQR {t.iqr:.2g} ms, {t.n} samples{submit})")
    return lines


def advice(result: EvalResult, thresholds: Thresholds, best: Optional[tuple[int, float]]) -> str:
    """What to do next; `best` is (round, speedup) of the best correct round before this one."""
    v, s = result.verdict, result.speedup
    if v is Verdict.CORRECT and s is not None:
        if s >= thresholds.target:
            text = f"{s:.2f}x clears the target of {thresholds.target}x: the task is done."
        elif s >= thresholds.accept:
            text = (f"{s:.2f}x is acceptable (>= {thresholds.accept}x) but short of the target "
                    f"{thresholds.target}x. Keep what works and remove what still costs time: "
                    "memory traffic, launches, occupancy.")
        else:
            slower = " It is slower than the reference." if s < 1 else ""
            text = (f"{s:.2f}x is below the acceptable {thresholds.accept}x.{slower} Tuning this "
                    "design will not be enough: think of a different strategy (how work is split "
                    "over the GPU, how many passes over memory) and write it.")
    else:
        text = {
            Verdict.INCORRECT: "Fix correctness first; a fast wrong answer scores nothing.",
            Verdict.COMPILE_ERROR: "Fix the compile errors above and keep the rest of the design.",
            Verdict.IMPORT_ERROR: "The file must import cleanly and define `ModelNew`; fix the "
                                  "error above.",
            Verdict.RUNTIME_ERROR: "Fix the error raised while running; check shapes, dtypes, "
                                   "contiguity and launch bounds.",
            Verdict.TIMEOUT: "The candidate ran past its time limit: look for a hang or a kernel "
                             "that does far more work than needed.",
            Verdict.CRASHED: "The process died (an illegal memory access or a bad launch is "
                             "typical): check every index against its bounds.",
            Verdict.REJECTED: "Do the real computation on the current stream for every call; "
                              "the measurement checks every output it times.",
            Verdict.NO_CODE: "Answer with the complete file in one ```python block.",
        }.get(v, "Address the problem above.")
    if best is not None and (s is None or not result.ok or best[1] > s):
        text += f" Best so far: round {best[0]} at {best[1]:.2f}x."
    return text


def _ms(result: EvalResult, name: str) -> str:
    timing = result.timings.get(name)
    return f"{timing.median:.4g}" if timing else "-"


def history_table(history: list[tuple[int, EvalResult]]) -> str:
    """A markdown table of earlier rounds, newest last."""
    rows = ["| round | verdict | speedup | candidate ms | reference ms |",
            "| --- | --- | --- | --- | --- |"]
    shown = history[-HISTORY_ROWS:]
    if len(history) > len(shown):
        rows.append(f"| 1-{shown[0][0] - 1} | ({len(history) - len(shown)} earlier rounds) | | | |")
    for n, r in shown:
        speedup = speedup_text(r.speedup if r.ok else None)
        rows.append(f"| {n} | {r.verdict.value} | {speedup} | {_ms(r, CANDIDATE)} | {_ms(r, REFERENCE)} |")
    return "\n".join(rows)


def best_of(history: list[tuple[int, EvalResult]]) -> Optional[tuple[int, float]]:
    correct = [(n, r.speedup) for n, r in history if r.ok and r.speedup is not None]
    return max(correct, key=lambda item: item[1]) if correct else None


def explanation_text(result: EvalResult, errors_shown: bool) -> str:
    """The explanation without what the feedback shows anyway: the verdict's sentence,
    times and mismatches that have their own lines, compiler errors in their block."""
    if result.ok or (result.check and not result.check.passed and result.check.reasons):
        return ""
    text = result.explanation.strip()
    if text.startswith(result.verdict.sentence):
        text = text[len(result.verdict.sentence):].strip()
    if errors_shown:
        text = text.split("First errors:")[0].strip()
    return text


def headline(result: EvalResult) -> str:
    """One line on what a round came to, for a status display."""
    if result.ok and result.speedup is not None:
        return f"{result.speedup:.2f}x"
    detail = (compiler_errors(result)[:1] or (result.check.reasons[:1] if result.check else [])
              or explanation_text(result, False).splitlines()[:1])
    return detail[0].strip()[:200] if detail else ""


def feedback_context(n: int, result: EvalResult, thresholds: Thresholds,
                     history: list[tuple[int, EvalResult]]) -> dict[str, Any]:
    """The feedback template's names; `history` holds the rounds before `n`."""
    errors = compiler_errors(result)
    return {
        "n": n,
        "verdict": result.verdict.value,
        "sentence": result.verdict.sentence,
        "explanation": explanation_text(result, bool(errors)),
        "compiler_errors": errors,
        "correctness": correctness_lines(result.check),
        "times": time_lines(result),
        "speedup": result.speedup if result.ok else None,
        "accept": thresholds.accept,
        "target": thresholds.target,
        "warnings": list(result.warnings),
        "advice": advice(result, thresholds, best_of(history)),
        "history": history_table(history + [(n, result)]),
    }


def feedback_text(prompts: Prompts, n: int, result: EvalResult, thresholds: Thresholds,
                  history: list[tuple[int, EvalResult]]) -> str:
    return prompts.render(FEEDBACK, **feedback_context(n, result, thresholds, history)).strip() + "\n"
