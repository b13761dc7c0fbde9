"""Small statistics on timing samples, in plain Python so any process can use them.

The speedup's interval is a paired bootstrap: candidate and reference are timed
in the same rounds, so resampling whole rounds keeps whatever drift a round shared.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Optional, Sequence

from .results import Timing

CONFIDENCE = 0.95
RESAMPLES = 1000


def rel_se_of_median(samples: Sequence[float]) -> float:
    """Relative standard error of the median, from a robust (IQR) spread."""
    n = len(samples)
    if n < 4:
        return math.inf
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    median = statistics.median(samples)
    sigma = (q3 - q1) / 1.349
    return 1.2533 * sigma / math.sqrt(n) / median if median > 0 else math.inf


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float], paired: bool = True,
                   confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                   seed: Optional[int] = 0) -> tuple[float, float]:
    """A `confidence` interval for median(numerator) / median(denominator), by a
    percentile bootstrap: over whole rounds when the samples are `paired` (index i of
    both came from one round), else over each list on its own."""
    if paired:
        n = min(len(numerator), len(denominator))
        numerator, denominator = numerator[:n], denominator[:n]
    if not numerator or not denominator:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    top, bottom = list(numerator), list(denominator)
    ratios = []
    for _ in range(resamples):
        picks = rng.choices(range(len(top)), k=len(top))
        others = picks if paired else rng.choices(range(len(bottom)), k=len(bottom))
        below = statistics.median([bottom[i] for i in others])
        ratios.append(statistics.median([top[i] for i in picks]) / below if below > 0 else math.inf)
    ratios.sort()
    tail = (1 - confidence) / 2
    low = ratios[int(tail * (resamples - 1))]
    high = ratios[int(math.ceil((1 - tail) * (resamples - 1)))]
    return (low, high)


def geomean(values: Sequence[float]) -> Optional[float]:
    """The geometric mean of the positive values; None where there are none."""
    positive = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in positive) / len(positive)) if positive else None


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Two intervals [low, high] share a point: no measurable difference between them."""
    return a[0] <= b[1] and b[0] <= a[1]


def summarize(samples: list[float], method: str, submit: list[float], overhead: float = 0.0,
              clock: str = "", ended: str = "") -> Timing:
    if len(samples) >= 2:
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = q3 = samples[0]
    return Timing(median=statistics.median(samples), iqr=q3 - q1, mean=statistics.fmean(samples),
                  min=min(samples), n=len(samples), rel_se=rel_se_of_median(samples), method=method,
                  overhead=overhead, submit_median=statistics.median(submit) if submit else 0.0,
                  samples=samples, clock=clock, ended=ended)
