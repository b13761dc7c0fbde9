"""The last phase of a candidate that passed every check: its speedup against each baseline,
the hardware's floor (a time below it is refused), and the verdict's sentence."""
from __future__ import annotations

from ..integrity import roofline
from ..results import CLOCK_NAMES, Clock, EvalResult, Verdict, speedup_text
from ..stats import geomean
from . import speedups
from .protocol import ReferenceReady
from .verdicts import Stop


def judge(result: EvalResult, info: ReferenceReady, backward: bool) -> None:
    """Speedups and verdict for a checked, timed candidate: on the verdict's clock, and on the second
    clock apart (each divides its own timings only: speedups.baselines refuses a mix)."""
    figures = [result] + ([result.second] if result.second else [])
    for each in figures:
        shapes = each.benchmark_shapes
        each.baselines = (speedups.over_shapes(shapes) if shapes
                          else speedups.baselines(each.timings, each.placement_spread or 0.0))
    shapes = result.benchmark_shapes
    headline = result.baselines[0]
    result.speedup, result.speedup_interval = headline.speedup, headline.interval
    _place_on_roofline(result, info)
    result.verdict = Verdict.CORRECT
    over, candidate_ms = ((f"Geometric mean over {len(shapes)} benchmark shapes: candidate",
                           geomean([s.candidate_ms for s in shapes])) if shapes
                          else ("Candidate", result.timings["candidate"].median))
    result.explanation = (f"{Verdict.CORRECT.sentence} {over} {candidate_ms:.4g} ms, {headline.label} "
                          f"{headline.median_ms:.4g} ms: "
                          f"{speedup_text(result.speedup, result.speedup_interval)}"
                          f"{' (forward and backward)' if backward else ''}"
                          f"{f' on {CLOCK_NAMES[Clock(result.clock)]}' if result.clock not in ('', Clock.HOST) else ''}.")


def _place_on_roofline(result: EvalResult, info: ReferenceReady) -> None:
    """Place the time against the hardware's limits; refuse the impossible."""
    cand = result.timings["candidate"]
    declared, peaks = info.roofline, info.peaks
    # what the problem declares is for its main shape: no floor for timings at other shapes
    if result.benchmark_shapes and all(s.values for s in result.benchmark_shapes):
        declared = {}
    line = roofline.assess(declared.get("bytes"), declared.get("flops"), peaks, cand.median)
    if declared:
        result.roofline = line
    if roofline.impossible(line, cand.median):
        raise Stop(Verdict.REJECTED, f"{Verdict.REJECTED.sentence} Its {cand.median:.4g} ms is below the "
                   f"physical floor of {line.floor_ms:.4g} ms: moving the problem's {line.bytes / 1e6:.0f} MB "
                   f"would take {line.achieved_gbs:.0f} GB/s, above the measured peak of "
                   f"{peaks.bandwidth_gbs:.0f} GB/s. The clock did not see all of its work.")
    if result.speedup and result.speedup > roofline.SUSPICIOUS_SPEEDUP:
        result.warnings.append(f"a speedup above {roofline.SUSPICIOUS_SPEEDUP:.0f}x is rare: check that the "
                               "reference is not unusually slow and that the kernel does all the work")
