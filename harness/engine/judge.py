"""The last phase of a candidate that passed every check: its speedup against each baseline,
the hardware's floor (a time below it is refused), and the verdict (verdicts.correct)."""
from __future__ import annotations

from ..integrity import roofline
from ..results import EvalResult
from .findings import BelowFloor
from .processes.protocol import ReferenceReady
from .timing import speedups
from .verdicts import correct


def judge(result: EvalResult, info: ReferenceReady, backward: bool) -> None:
    """Speedups and verdict for a checked, timed candidate: on the verdict's clock, and on the second
    clock apart (each divides its own timings only: speedups.baselines refuses a mix)."""
    figures = [result] + ([result.second] if result.second else [])
    # the verdict's clock's (Measure._time): baselines resting on the reference alone, the gaps that widen it
    apart = frozenset(result.details.get("rests_on_alone") or ())
    widen = speedups.widening(result.details.get("process_spread") or 0.0, result.details.get("reference_gap") or 0.0)
    for each in figures:
        shapes = each.benchmark_shapes
        mine = each is result
        each.baselines = (speedups.over_shapes(shapes) if shapes
                          else speedups.baselines(each.timings, each.placement_spread or 0.0,
                                                  apart if mine else frozenset(), widen if mine else (0.0, 0.0)))
    headline = result.baselines[0]
    result.speedup, result.speedup_interval = headline.speedup, headline.interval
    _place_on_roofline(result, info)
    correct(result, backward)


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
        raise BelowFloor(cand.median, line, peaks.bandwidth_gbs)
    if result.speedup and result.speedup > roofline.SUSPICIOUS_SPEEDUP:
        result.warnings.append(f"a speedup above {roofline.SUSPICIOUS_SPEEDUP:.0f}x is rare: check that the "
                               "reference is not unusually slow and that the kernel does all the work")
