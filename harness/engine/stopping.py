"""When a timing stage has sampled enough: named stopping criteria, as nvbench names its own.

A criterion looks at the samples taken so far, one list per timed callable, and says whether the
answer is known. The time cap (and the most samples) bound every stage whatever the criterion
says, and a stage never stops before its fewest samples. Stopping early only makes the interval
wider: the speedup's interval is always the bootstrap of the samples taken (stats.ratio_interval),
whatever stopped the sampling.

`--stop NAME` chooses one; each result names the criterion it was timed under and why each stage
ended (Timing.stop).
"""
from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from ..stats import rel_se_of_median

Samples = Mapping[str, Sequence[float]]  # timed callable -> its samples so far, in ms

Z95 = 1.96  # a normal 95% interval's half-width, in standard errors


class Criterion:
    """One way to decide that a stage has sampled enough. `target` is the criterion's own
    threshold (relative); `defaults` gives it by device kind when none is given."""

    name = ""
    summary = ""  # what it waits for, in words, with "{target}" for the threshold
    defaults: dict[str, float] = {}

    def met(self, samples: Samples, target: float) -> bool:
        raise NotImplementedError

    def default_target(self, device: str) -> float:
        return self.defaults.get("cpu" if device == "cpu" else "cuda", 0.0)

    def describe(self, target: float) -> str:
        return self.summary.format(target=f"{target:.2%}".replace(".00%", "%"))


class IntervalWidth(Criterion):
    """The speedup's interval is narrow enough: for the two noisiest callables, the ratio of their
    medians has an estimated 95% half-width (from each median's standard error, as if unpaired, so
    at least the paired bootstrap's) within the target."""

    name = "interval"
    summary = "until any two medians' ratio was known within ±{target} (95%)"
    defaults = {"cuda": 0.01, "cpu": 0.03}

    def met(self, samples: Samples, target: float) -> bool:
        errors = sorted((rel_se_of_median(s) for s in samples.values()), reverse=True)
        if not errors:
            return False
        widest = math.hypot(errors[0], errors[1] if len(errors) > 1 else 0.0)
        return Z95 * widest <= target


class RelativeError(Criterion):
    """Every median's relative standard error is within the target."""

    name = "rel-se"
    summary = "until every median's relative standard error was under {target}"
    defaults = {"cuda": 0.002, "cpu": 0.01}

    def met(self, samples: Samples, target: float) -> bool:
        return all(rel_se_of_median(s) <= target for s in samples.values())


class Settled(Criterion):
    """The noise has settled: every median's relative standard error is within the target, and the
    median of its last third of samples agrees with the earlier two thirds' within the target too,
    so a drift (clocks still ramping, a cache still warming) is waited out."""

    name = "settled"
    summary = "until every median's standard error was under {target} and its last third agreed with the rest"
    defaults = {"cuda": 0.005, "cpu": 0.02}

    def met(self, samples: Samples, target: float) -> bool:
        for s in samples.values():
            cut = 2 * len(s) // 3
            if cut < 1 or rel_se_of_median(s) > target:
                return False
            earlier, last = statistics.median(s[:cut]), statistics.median(s[cut:])
            if earlier <= 0 or abs(last / earlier - 1) > target:
                return False
        return True


class Cap(Criterion):
    """Never met: every stage samples until its time cap or its most samples."""

    name = "cap"
    summary = "until the time cap or the most samples"

    def met(self, samples: Samples, target: float) -> bool:
        return False


CRITERIA: dict[str, Criterion] = {c.name: c for c in (IntervalWidth(), RelativeError(), Settled(), Cap())}
DEFAULT = IntervalWidth.name


def criterion(name: str) -> Criterion:
    """The criterion called `name`; ValueError naming the known ones otherwise."""
    try:
        return CRITERIA[name]
    except KeyError:
        raise ValueError(f"unknown stopping criterion {name!r}: choose one of {', '.join(CRITERIA)}") from None
