"""The phases of one evaluation, in the order they run: one closed set of names for the seconds
each took (EvalResult.phase_seconds), and for what a live view is told as each begins."""
from __future__ import annotations

from enum import Enum
from typing import Callable

Notify = Callable[[str], None]  # told what an evaluation is doing now, for a live view


# Told once a candidate's last timing has let the device go, its timed outputs' re-check next: a sweep
# starts the next problem then, its checks beside this one's re-check and other shapes.
RECHECKING = "re-checking the timed outputs"


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
