"""A degenerate problem: one whose speedups measure nothing, since a candidate passes its check without
the problem's work. Its output does not depend on its inputs (one value everywhere, or the same tensor on
every input draw), or repeats along a dimension (a slice computed once and broadcast passes), or, under
--backward, no gradient reaches its inputs. The reference process finds it as it loads the problem
(integrity/degenerate.py); each view says it in these sentences. Pure, and free of torch."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional


class Kind(str, enum.Enum):
    CONSTANT = "constant"  # one value everywhere, the same on every input draw
    INPUT_INDEPENDENT = "input_independent"  # the same tensor on every input draw, not one value
    CONSTANT_ALONG_DIM = "constant_along_dim"  # on each draw, every slice along `dims` equals the first
    NO_GRADIENT = "no_gradient"  # --backward: every floating-point input's gradient is zero or none


@dataclass
class Degenerate:
    """One finding: what an output (or, NO_GRADIENT, the inputs' gradients) does whatever the inputs."""

    kind: Kind
    output: Optional[int] = None  # which of forward's outputs; None: its only one (NO_GRADIENT: none)
    dims: list[int] = field(default_factory=list)  # CONSTANT_ALONG_DIM: the dimensions it repeats along
    value: Optional[float] = None  # CONSTANT: the value
    shape: list[int] = field(default_factory=list)  # the output's
    draws: int = 0  # input draws from different seeds it was seen on

    @property
    def label(self) -> str:
        return "the output" if self.output is None else f"output {self.output}"

    @property
    def tag(self) -> str:
        """In brief, for a record or a list: "constant (1)", "constant_along_dim (dim 1)", "output 1: ..."."""
        said = self.kind.value
        if self.kind is Kind.CONSTANT and self.value is not None:
            said += f" ({self.value:g})"
        if self.dims:
            said += f" (dim{'s' if len(self.dims) > 1 else ''} {', '.join(map(str, self.dims))})"
        return said if self.output is None else f"output {self.output}: {said}"

    @property
    def text(self) -> str:
        """What was seen, and what a candidate can return instead of doing the work."""
        label, shape = self.label.capitalize(), f"shape ({', '.join(map(str, self.shape))})"
        seen = f"on {self.draws} input draws from different seeds"
        if self.kind is Kind.CONSTANT:
            return (f"{label} is {self.value:g} everywhere {seen}: it does not depend on the inputs, so a "
                    "candidate that returns that constant passes the check.")
        if self.kind is Kind.INPUT_INDEPENDENT:
            return (f"{label} ({shape}) is the same tensor {seen}: it does not depend on the inputs, so a "
                    "candidate that computes it once and returns it passes the check.")
        if self.kind is Kind.CONSTANT_ALONG_DIM and set(self.dims) == {d for d, n in enumerate(self.shape) if n > 1}:
            return (f"{label} ({shape}) is one value everywhere on each of {self.draws} input draws, a value that "
                    "changes with them: a candidate that computes that one number and broadcasts it passes the "
                    "check.")
        if self.kind is Kind.CONSTANT_ALONG_DIM:
            dims = ", ".join(map(str, self.dims))
            return (f"{label} ({shape}) repeats along dim{'s' if len(self.dims) > 1 else ''} {dims} {seen}: every "
                    "slice along it equals the first, so a candidate that computes one slice and broadcasts it "
                    "passes the check.")
        return ("No gradient reaches the inputs: every floating-point input's gradient is zero or none, so the "
                "backward checks nothing of them.")


def problem_text(found: list[Degenerate]) -> str:
    """One paragraph on a degenerate problem; "" for one that is not."""
    if not found:
        return ""
    return ("The problem is degenerate. " + " ".join(d.text for d in found)
            + " A speedup measured on it means nothing.")


def tags(found: list[Degenerate]) -> str:
    """The findings in brief, "; "-separated (SweepRecord.degenerate); "" for none."""
    return "; ".join(d.tag for d in found)
