"""From timings to the figures a user reads: the speedup over each baseline, with its interval.

The timings of one evaluation are keyed by what was timed:
  candidate, reference                  beside each other in the candidate's process (IEEE float32)
  reference_defaults                    beside them, under PyTorch's default float32 settings
                                        (timed only where those change the reference's outputs)
  compiled, compiled_defaults           torch.compile of the reference, alone in the reference's process
  placement_<n>                         twins of the reference, alone, their parameters at other addresses

Two instances of one model differ in where their parameters sit, and on a GPU that alone moves a
forward's time (LayerNorm's 32 MB of weights, moved: up to 1% on an H200). The bootstrap cannot see
it: each instance keeps its addresses for the whole timing. So the reference's twins measure it, and
every interval is widened by the largest shift they show (`placement_spread`), and by RESOLUTION
besides: copies of KernelBench's 200 level 1 and 2 models (H200), placement counted, missed 1.0 by
at most 0.01% beyond their bootstrap intervals (6 of 200; up to 0.06% before the twins), so
a difference under 0.1% is not one the harness can vouch for.

The headline is against eager PyTorch as users run it: under its default settings.
"""
from __future__ import annotations

import math
from typing import Optional

from ..results import Baseline, ShapeTiming, Timing
from ..stats import geomean, overlap, ratio_interval, summarize

# (baseline name, numerics, timings key), the headline first
_BASELINES = (("eager", "default", "reference_defaults"), ("eager", "ieee", "reference"),
              ("torch.compile", "default", "compiled_defaults"), ("torch.compile", "ieee", "compiled"))
# beside the candidate, so sample i of each shares a round with the candidate's sample i
_PAIRED = {"reference", "reference_defaults"}

# Work seen only by the synchronous samples, beyond what the reference shows there too:
# past this share of the queued time (plus a floor for clock ramp-up on short calls),
# it ran where the queued events could not see it.
HIDDEN_SHARE = 0.2
HIDDEN_FLOOR_MS = 0.05

# Every interval's widening beyond the bootstrap and the twins' spread, each side (relative).
RESOLUTION = 0.001


def hidden_work_ms(timings: dict[str, Timing]) -> float:
    """The candidate's time that only a device-wide synchronize saw, in ms (0 on CPU).

    The synchronous protocol costs every call some extra time (an idle GPU clocks down,
    the host's launch is inside the window); the reference beside it shows how much."""
    cand, ref = timings["candidate"], timings["reference"]
    if not (cand.on_gpu and cand.sync_samples and ref.sync_samples):
        return 0.0
    protocol_excess = max(ref.sync_median - ref.median, 0.0)
    return max(cand.sync_median - cand.median - protocol_excess, 0.0)


def hides_work(timings: dict[str, Timing]) -> bool:
    cand = timings["candidate"]
    return hidden_work_ms(timings) > HIDDEN_SHARE * cand.median + HIDDEN_FLOOR_MS


def synchronous(timing: Timing) -> Timing:
    """The same timing read from its synchronous samples alone."""
    return summarize(timing.sync_samples, timing.method, [timing.submit_median], timing.overhead,
                     timing.sync_samples)


def placement_spread(reference: Timing, twins: list[Timing]) -> float:
    """The largest shift, as |log| of the ratio of medians, between the reference and one of its twins
    (timed in the same rounds), counting only shifts whose interval leaves out 1: noise is the
    bootstrap's part already. 0 without twins."""
    shifts = [0.0]
    for twin in twins:
        low, high = ratio_interval(reference.samples, twin.samples, paired=True)
        if reference.median > 0 and twin.median > 0 and not low <= 1.0 <= high:
            shifts.append(abs(math.log(reference.median / twin.median)))
    return max(shifts)


def baselines(timings: dict[str, Timing], spread: float = 0.0) -> list[Baseline]:
    """Every baseline timed, the headline (eager under PyTorch's defaults) first; each interval
    widened on both sides by `spread` (placement_spread) and RESOLUTION."""
    widen = math.exp(spread + RESOLUTION)
    cand = timings["candidate"]
    found = []
    keys = {key for _, _, key in _BASELINES if key in timings}
    for name, numerics, key in _BASELINES:
        if key not in timings:
            continue
        if numerics == "ieee" and f"{key}_defaults" not in keys:
            numerics = "same"  # the defaults did not change this reference: one baseline serves both
        base = timings[key]
        paired = key in _PAIRED
        low, high = ratio_interval(base.samples, cand.samples, paired=paired) if base.samples and cand.samples \
            else (base.median / cand.median,) * 2
        found.append(Baseline(name=name, numerics=numerics, key=key, median_ms=base.median,
                              speedup=base.median / cand.median,
                              interval=[low / widen, high * widen], paired=paired))
    return found


def over_shapes(shapes: list[ShapeTiming]) -> list[Baseline]:
    """Each baseline timed at every benchmark shape, as the geometric mean over the shapes: of its
    medians, so the speedup is the geometric mean of the per-shape speedups, and of each bound of
    the per-shape intervals. Averaging the log bounds is how the intervals would combine were the
    shapes' errors perfectly correlated: never narrower than independent errors give (the mean of
    half-widths bounds their root-sum-square over k), so conservative, and it needs only the
    recorded per-shape intervals."""
    keys = [b.key for b in shapes[0].baselines]
    combined = []
    for key in keys:
        each = [next((b for b in s.baselines if b.key == key), None) for s in shapes]
        if None in each:
            continue
        first = each[0]
        combined.append(Baseline(name=first.name, numerics=first.numerics, key=key,
                                 median_ms=geomean([b.median_ms for b in each]),
                                 speedup=geomean([b.speedup for b in each]),
                                 interval=[geomean([b.interval[i] for b in each]) for i in (0, 1)],
                                 paired=all(b.paired for b in each)))
    return combined


def headline(found: list[Baseline]) -> Optional[Baseline]:
    return found[0] if found else None


def shown(found: list[Baseline]) -> list[Baseline]:
    """The baselines worth a line: the IEEE one only where its interval stands apart from
    the default one's (otherwise the two are one figure, within the noise)."""
    by = {(b.name, b.numerics): b for b in found}
    kept = []
    for b in found:
        default = by.get((b.name, "default"))
        if b.numerics == "ieee" and default and overlap(b.interval, default.interval):
            continue
        kept.append(b)
    return kept
