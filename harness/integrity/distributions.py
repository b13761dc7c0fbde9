"""Inputs the problem's get_inputs() does not draw: an audit checks the candidate again on each trial's
inputs moved to other magnitudes, where a kernel that holds on randn's scale can fail. A softmax that
skips subtracting the row's maximum overflows at a scale of a thousand; a half-precision intermediate
overflows there too; an epsilon added in the wrong place shows at a thousandth; a division by a norm
meets exact zeros.

Both processes move the seed's draw the same way (a pure function of the values), so the inputs' checksums
still match. A moved draw is judged against the reference in float64, atol scaled up as the inputs were
(atol_scale) and eager float32's own error allowed beside it (checking/trials.py): where eager is the one
that loses accuracy there, a candidate is not blamed for differing from it. Where the reference's outputs
are not finite on a moved draw, the problem does not allow that distribution, and it is skipped with the
reason."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    """Every floating-point input tensor moved to `scale` * x + `shift`, or with its small values made 0."""

    name: str
    says: str  # how the inputs were moved, for a sentence: "scaled by 1000"
    scale: float = 1.0
    shift: float = 0.0
    zeros_below: float = 0.0  # elements whose magnitude is under this become exact zeros

    @property
    def atol_scale(self) -> float:
        """What atol is multiplied by on these inputs: it is in the outputs' units, which follow the inputs' scale
        and shift up (a float32 scan of randn scaled by 1000 errs by ulps of sums near 3e4, 0.03), never down."""
        return max(1.0, abs(self.scale), abs(self.shift))

    def move(self, values: list) -> list:
        """The drawn inputs moved (new tensors of the same dtype); what is not a floating-point tensor as it was."""
        import torch  # here: the harness's own process reads the names above and never imports torch

        return [self._moved(torch, v) if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v
                for v in values]

    def _moved(self, torch, tensor):
        with torch.no_grad():
            moved = tensor * self.scale + self.shift
            if self.zeros_below:
                moved = torch.where(tensor.abs() < self.zeros_below, torch.zeros_like(moved), moved)
        return moved


DISTRIBUTIONS = (
    Distribution("large", "scaled by 1000", scale=1e3),
    Distribution("small", "scaled by 0.001", scale=1e-3),
    Distribution("shifted", "shifted by +100", shift=100.0),
    # about two in five of randn's values: rows of zeros appear in small rows, a norm of zero in short ones
    Distribution("zeros", "with every value under 0.5 in magnitude made 0", zeros_below=0.5),
)


def named(name: str) -> Distribution:
    """The distribution called `name`; a KeyError names the ones there are."""
    for distribution in DISTRIBUTIONS:
        if distribution.name == name:
            return distribution
    raise KeyError(f"no input distribution {name!r}: {', '.join(d.name for d in DISTRIBUTIONS)}")


def moved(values: list, name: str) -> list:
    """`values` as the distribution `name` moves them; as they are where `name` is empty."""
    return named(name).move(values) if name else values
