"""The phases of one evaluation, in the order they run: one closed set of names for the seconds
each took (EvalResult.phase_seconds), and for what a live view is told as each begins."""
from __future__ import annotations

from enum import Enum
from typing import Callable

Notify = Callable[[str], None]  # told what an evaluation is doing now, for a live view


def quiet(doing: str) -> None:
    pass


class Phase(str, Enum):
    BUILD = "build"  # the static check and the compile (a pool runs these ahead, many at once)
    START = "start"  # the reference process ready and the candidate's worker importing its build
    CHECK = "check"  # trials on fresh inputs, each compared with the reference
    TIME = "time"  # candidate and reference timed beside each other, then the reference alone
    SHAPES = "shapes"  # the CUDA graph's capture and replay, then the problem's other shapes
    PROFILE = "profile"  # after a correct verdict, where asked: one forward under the profiler

    @property
    def doing(self) -> str:
        """What a live view is told as the phase begins ("" for none)."""
        return _DOING[self]


_DOING = {Phase.BUILD: "building", Phase.START: "", Phase.CHECK: "checking", Phase.TIME: "timing",
          Phase.SHAPES: "checking other shapes", Phase.PROFILE: "profiling"}
