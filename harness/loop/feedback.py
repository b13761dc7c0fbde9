"""The feedback after a round: what happened, what it measured, what to do next.

Pure: an EvalResult, the thresholds and the earlier rounds in, a template
context (and through the feedback template, text) out. Advice follows the
protocol the task is set in: below `accept` ask for a different strategy,
between `accept` and `target` keep going for the target.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..degenerate import problem_text
from ..integrity.roofline import roofline_text
from ..results import CLOCK_NAMES, CheckResult, Clock, EvalResult, Verdict, clears, speedup_text, tolerance_text
from ..engine.timing.speedups import faster_of, shown
from ..stats import overlap
from .profile_text import profile_lines
from .prompts import FEEDBACK, Prompts, Reader

# Names of the two timings every correct result has.
CANDIDATE = "candidate"
REFERENCE = "reference"
# Rounds shown in the history table; older ones are summarised in one line, except the best.
HISTORY_ROWS = 12
# Half-width of a speedup's noise band, relative, for results recorded without an interval.
NOISE = 0.02
# Characters of a round's approach kept for the history table.
APPROACH_CHARS = 80
# Warnings meant for the person running the harness, about the measurement, not the candidate.
_FOR_PEOPLE = ("a speedup above", "the reference ran", "the reference's parameters (")


class Past(NamedTuple):
    """An earlier round as the feedback sees it: its number, its result, its approach in brief."""

    n: int
    eval: EvalResult
    approach: str = ""


@dataclass
class Thresholds:
    accept: float = 1.5
    target: float = 2.0

    def reached(self, result: EvalResult) -> bool:
        """The target cleared; never on a degenerate problem, whose speedups measure nothing."""
        return (result.ok and result.speedup is not None and not result.problem_degenerate
                and clears(result.speedup, result.speedup_interval, self.target))


def correctness_lines(check: Optional[CheckResult], tolerance: str = "") -> list[str]:
    """`tolerance`: the allclose tolerance the check applied (results.tolerance_text)."""
    if check is None:
        return []
    at = f" at {tolerance}" if tolerance else ""
    if check.passed:
        return [f"matched the reference on {check.trials} trial(s){at}; max abs error "
                f"{check.max_abs_error:.3g}, max rel error {check.max_rel_error:.3g} (where |reference| > atol)"]
    lines = list(check.reasons) + ([f"checked{at}"] if at else [])
    if check.failed_trial is not None:
        lines.append(f"failed on trial {check.failed_trial}")
    if check.max_abs_error or check.max_rel_error:
        lines.append(f"max abs error {check.max_abs_error:.3g}, max rel error {check.max_rel_error:.3g} "
                     "(where |reference| > atol)")
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


def build_line(result: EvalResult) -> str:
    if result.build is None:
        return ""
    return "cached (built before)" if result.build.cached else f"{result.build.seconds:.1f} s"


def warning_lines(result: EvalResult, hidden: frozenset[str]) -> list[str]:
    """The warnings a model can act on: not the problem's own, nor those about the measurement."""
    return [w for w in result.warnings if w not in hidden and not w.startswith(_FOR_PEOPLE)]


def time_lines(result: EvalResult) -> list[str]:
    lines = []
    for name, t in result.timings.items():
        # on a GPU the host's time to launch is in the window; a model can shorten it too
        submit = f"; host submit {t.submit_median:.2g} ms" if t.on_gpu and t.submit_median else ""
        lines.append(f"{name}: {t.median:.4g} ms (IQR {t.iqr:.2g} ms, {t.n} samples{submit})")
    # under --backward each pass on its own, so a model sees which of its kernels costs the time
    lines += [f"{name} by pass: forward {forward:.4g} ms, backward about {backward:.4g} ms (forward and backward "
              f"{both:.4g} ms, timed as one call; the backward is that less the forward timed alone)"
              for name, (forward, backward, both) in result.pass_times().items()]
    second = result.second
    if second and second.baselines and "candidate" in second.timings:
        head = second.baselines[0]
        lines.append(f"on {CLOCK_NAMES[Clock(second.clock)]} (reported apart, not the headline): candidate "
                     f"{second.timings['candidate'].median:.4g} ms, {head.label} {head.median_ms:.4g} ms, "
                     f"{speedup_text(head.speedup, head.interval)}")
    if result.host_share:  # a fact about where its time goes, which a model can act on
        lines.append(result.host_share.text)
    return lines


def interval(result: EvalResult) -> tuple[float, float]:
    """A correct result's 95% speedup interval; a band of NOISE around the speedup where none
    was recorded."""
    if result.speedup_interval:
        low, high = result.speedup_interval
        return float(low), float(high)
    return result.speedup * (1 - NOISE), result.speedup * (1 + NOISE)


def measurably_faster(result: EvalResult, than: EvalResult) -> bool:
    """Faster beyond the noise: higher, and the two intervals apart."""
    return result.speedup > than.speedup and not overlap(interval(result), interval(than))


def comparison(result: EvalResult, best: Optional[Past], reader: Reader = Reader.LOOP) -> str:
    """How a correct result stands against the best before it, noise taken into account; `reader` says
    where that best candidate is (pinned in the loop's conversation, a round of an agent's run)."""
    if best is None or not result.ok or result.speedup is None:
        return ""
    was = f"round {best.n}'s {best.eval.speedup:.2f}x"
    if overlap(interval(result), interval(best.eval)):
        return f"No measurable change from {was}: the two speedups' intervals overlap."
    if result.speedup > best.eval.speedup:
        return f"A measurable gain over {was}."
    where = "pinned above" if reader is Reader.LOOP else "show_round gives its source"
    return (f"Slower than {was} beyond the noise: continue from round {best.n}'s candidate ({where}), "
            "not from this one.")


# Advice words that differ between a GPU and a CPU (--device cpu), by what they name.
_GPU_WORDS = {"costs": "memory traffic, launches, occupancy",
              "split": "how work is split over the GPU, how many passes over memory",
              "bounds": "launch bounds", "busy": "a kernel", "died": "an illegal memory access or a bad launch",
              "where": " on the current stream"}
_CPU_WORDS = {"costs": "memory traffic, per-call overhead, inner loops that do not vectorise",
              "split": "how the loops map onto the core's SIMD lanes, how many passes over memory, "
                       "what stays in cache",
              "bounds": "loop bounds", "busy": "a loop", "died": "a read or write out of bounds", "where": ""}


# A runtime error that is a limit the harness stopped the candidate at (Child.over): what went over, and what to do.
_OVER = {"log": ("The candidate flooded its log and was stopped.",
                 "Remove the prints and logging from forward and the kernels, or write far less: its output went over "
                 "the log's limit."),
         "host_memory": ("The candidate went over the host memory limit and was stopped.",
                         "Hold less host memory: free what each call allocates, and keep no growing cache."),
         "processes": ("The candidate started more processes than allowed and was stopped.",
                       "Start no processes, or far fewer: the work belongs in the kernels of this process.")}


def sentence(result: EvalResult) -> str:
    """The verdict's sentence, or what the limit it went over says instead (a log flood is not an error raised)."""
    over = _OVER.get(result.details.get("over", "")) if result.verdict is Verdict.RUNTIME_ERROR else None
    return over[0] if over else result.verdict.sentence


def advice(result: EvalResult, thresholds: Thresholds, best: Optional[tuple[int, float]], cpu: bool = False,
           reader: Reader = Reader.LOOP) -> str:
    """What to do next, in a CPU's terms with `cpu`; `best` is (round, speedup) of the best correct
    round before this one. A `reader` without rounds has no task to call done."""
    v, s = result.verdict, result.speedup
    words = _CPU_WORDS if cpu else _GPU_WORDS
    if v is Verdict.CORRECT and s is not None:
        if result.problem_degenerate:
            text = f"{problem_text(result.problem_degenerate)} No speedup on it finishes the task, {s:.2f}x included."
        elif thresholds.reached(result):
            text = f"{s:.2f}x clears the target of {thresholds.target}x" + (": the task is done." if reader.rounds
                                                                             else ".")
        elif s >= thresholds.accept:
            shown = speedup_text(s, result.speedup_interval)
            unsure = (f" (it reads {thresholds.target}x or more, but its interval, {shown}, reaches below it)"
                      if s >= thresholds.target else "")
            text = (f"{s:.2f}x is acceptable (>= {thresholds.accept}x) but short of the target "
                    f"{thresholds.target}x{unsure}. Keep what works and remove what still costs time: "
                    f"{words['costs']}.")
        else:
            slower = " It is slower than the reference." if s < 1 else ""
            text = (f"{s:.2f}x is below the acceptable {thresholds.accept}x.{slower} Tuning this "
                    f"design will not be enough: think of a different strategy ({words['split']}) "
                    "and write it.")
    elif v is Verdict.RUNTIME_ERROR and result.details.get("over") in _OVER:
        text = _OVER[result.details["over"]][1]
    else:
        text = {
            Verdict.INCORRECT: "Fix correctness first; a fast wrong answer scores nothing.",
            Verdict.COMPILE_ERROR: "Fix the compile errors above and keep the rest of the design.",
            Verdict.IMPORT_ERROR: "The file must import cleanly and define `ModelNew`; fix the "
                                  "error above.",
            Verdict.RUNTIME_ERROR: "Fix the error raised while running; check shapes, dtypes, "
                                   f"contiguity and {words['bounds']}.",
            Verdict.TIMEOUT: f"The candidate ran past its time limit: look for a hang or {words['busy']} "
                             "that does far more work than needed.",
            Verdict.CRASHED: f"The process died ({words['died']} is typical): check every index "
                             "against its bounds.",
            Verdict.REJECTED: f"Do the real computation{words['where']} for every call; "
                              "the measurement checks every output it times.",
            Verdict.NO_CODE: "Answer with the complete file in one ```python block.",
        }.get(v, "Address the problem above.")
    if best is not None and (s is None or not result.ok or best[1] > s):
        text += f" Best so far: round {best[0]} at {best[1]:.2f}x."
    return text


def _ms(result: EvalResult, name: str) -> str:
    timing = result.timings.get(name)
    return f"{timing.median:.4g}" if timing else "-"


def history_table(history: list[Past]) -> str:
    """A markdown table of earlier rounds, newest last; the best keeps its row when older rounds fold."""
    rows = ["| round | verdict | speedup | candidate ms | reference ms | approach |",
            "| --- | --- | --- | --- | --- | --- |"]
    best = best_past(history)
    keep = {p.n for p in history[-HISTORY_ROWS:]} | ({best.n} if best else set())
    shown = [p for p in history if p.n in keep]
    folded = [p.n for p in history if p.n not in keep]
    if folded:
        rows.append(f"| {folded[0]}-{folded[-1]} | ({len(folded)} earlier rounds) | | | | |")
    for p in shown:
        r = p.eval
        speedup = speedup_text(r.speedup if r.ok else None)
        approach = p.approach.replace("|", "/")
        rows.append(f"| {p.n} | {r.verdict.value} | {speedup} | {_ms(r, CANDIDATE)} | {_ms(r, REFERENCE)} "
                    f"| {approach} |")
    return "\n".join(rows)


def best_past(history: list[Past]) -> Optional[Past]:
    correct = [p for p in history if p.eval.ok and p.eval.speedup is not None]
    return max(correct, key=lambda p: p.eval.speedup) if correct else None


def best_of(history: list[Past]) -> Optional[tuple[int, float]]:
    best = best_past(history)
    return (best.n, best.eval.speedup) if best else None


def pinned_note(best: Past, standing: str = "the best correct candidate so far",
                ask: str = "Build on it unless the feedback says otherwise.") -> str:
    """What the pinned copy of a candidate (the best, or a sample's parent) says about itself."""
    times = ", ".join(f"{name} {_ms(best.eval, name)} ms" for name in (CANDIDATE, REFERENCE))
    return f"The answer above is round {best.n}'s, {standing}: {best.eval.speedup:.2f}x ({times}). {ask}"


def parent_note(parent: Past, rank: int, width: int) -> str:
    """The pinned note of a sample's parent under --beam."""
    return pinned_note(parent, f"number {rank} of the {width} best correct candidates kept",
                       "Start from it and make it faster; the feedback below is on the last round.")


def direction_line(direction: str) -> str:
    """What a sample is asked to try, after the round's prompt (--samples K)."""
    return f"\n\nFor this answer, try {direction}." if direction else ""


def sample_line(i: int, result: EvalResult, direction: str = "", parent: Optional[tuple[int, float]] = None) -> str:
    """One sample's outcome in short, with what it tried and where it started."""
    tried = [direction.split(":")[0]] if direction else []
    tried += [f"from round {parent[0]}'s {parent[1]:.2f}x"] if parent else []
    label = f"sample {i + 1}" + (f" ({', '.join(tried)})" if tried else "")
    return f"{label}: {result.verdict.value} {headline(result)}".rstrip()


def stalled(history: list[Past]) -> int:
    """Rounds since the best last improved beyond the noise (0 until a candidate is correct)."""
    best, since = None, 0
    for p in history:
        if best is not None:
            since += 1
        if p.eval.ok and p.eval.speedup is not None and (best is None or measurably_faster(p.eval, best)):
            best, since = p.eval, 0
    return since


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


def feedback_context(n: int, result: EvalResult, thresholds: Thresholds, history: list[Past],
                     approach: str = "", notes: Optional[list[str]] = None,
                     hidden: frozenset[str] = frozenset(), cpu: bool = False,
                     reader: Reader = Reader.LOOP) -> dict[str, Any]:
    """The feedback template's names; `history` holds the rounds before `n`; `notes` are
    lines the loop adds (a repeated candidate, a restart); `hidden`, warnings left out
    (the problem's own, which every result carries); `cpu`, advice in a CPU's terms; `reader`, who
    reads it: without rounds (Reader.CALL) no round number nor table of rounds."""
    errors = compiler_errors(result)
    compared = comparison(result, best_past(history), reader)
    return {
        "n": n if reader.rounds else None,
        "verdict": result.verdict.value,
        "sentence": sentence(result),
        "explanation": explanation_text(result, bool(errors)),
        "compiler_errors": errors,
        "correctness": correctness_lines(result.check, tolerance_text(result)),
        "times": time_lines(result),
        "speedup": result.speedup if result.ok else None,
        "speedup_line": speedup_line(result) if result.ok else "",
        "roofline": roofline_text(result.roofline) if result.ok and result.roofline else "",
        "build": build_line(result),
        "profile": profile_lines(result.profile) if result.ok else [],
        "accept": thresholds.accept,
        "target": thresholds.target,
        "warnings": warning_lines(result, hidden),
        "notes": [line for line in [compared, *(notes or [])] if line],
        "model_mode": result.model_mode,
        "backward": result.backward,
        "advice": advice(result, thresholds, best_of(history), cpu, reader),
        "history": history_table(history + [Past(n, result, approach)]) if reader.rounds else "",
    }


def speedup_line(result: EvalResult) -> str:
    """The headline with its interval and basis, and any other baseline that stands apart."""
    if result.speedup is None:
        return ""
    over = result.baselines[0].label if result.baselines else "eager PyTorch"
    chosen = faster_of(result.baselines, result.baselines[0]) if result.baselines else ""
    over += f" ({chosen})" if chosen else ""
    line = f"{speedup_text(result.speedup, result.speedup_interval)}{' (95% interval)' if result.speedup_interval else ''} over {over}"
    others = [f"{speedup_text(b.speedup, b.interval)} over {b.label}" for b in shown(result.baselines)[1:]]
    line += "; " + "; ".join(others) if others else ""
    shapes = result.benchmark_shapes
    if shapes:
        line = (f"geometric mean over {len(shapes)} benchmark shapes: {line} (per shape: "
                + "; ".join(s.text for s in shapes) + ")")
    return line


def feedback_text(prompts: Prompts, n: int, result: EvalResult, thresholds: Thresholds, history: list[Past],
                  approach: str = "", notes: Optional[list[str]] = None,
                  hidden: frozenset[str] = frozenset(), cpu: bool = False, reader: Reader = Reader.LOOP) -> str:
    context = feedback_context(n, result, thresholds, history, approach, notes, hidden, cpu, reader)
    return prompts.render(FEEDBACK, **context).strip() + "\n"
