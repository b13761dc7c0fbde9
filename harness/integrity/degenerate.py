"""Finding a degenerate problem (harness/degenerate.py) as the reference process loads it: the
reference's outputs on fresh input draws, compared with each other and with themselves along each
dimension; under --backward, the inputs' gradients.

Comparisons are exact (NaN where NaN): an output constant only within the check's tolerance is the
problem lint's to say (lint.py). Each looks at a few elements first, then reads the rest a piece at a
time, no temporary bigger than CHUNK elements, stopping at the first piece that differs: on a problem
that is not degenerate the few elements differ, so the check costs little beyond its forwards and its draw."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..degenerate import Degenerate, Kind
from .digest import CHUNK
from .lint import same_slice

# an output the same on two draws is drawn a third time: a small integer output repeats by chance
CONFIRM = 3
PROBE = 4096  # elements compared first: two tensors that differ mostly differ there


def find(outputs: list, draw: Callable[[], list]) -> list[Degenerate]:
    """What the reference's outputs do whatever the inputs: `outputs`, its outputs on one input draw, and
    `draw`, which gives its outputs on a fresh one (another seed each call). Two draws, a third where an
    output is the same on both; two draws' outputs are held at once at most."""
    first = _tensors(outputs)
    del outputs
    along = [repeating_dims(out) for out in first]
    second = _tensors(draw())
    same = [_same(a, b) for a, b in zip(first, second)]
    along = [[d for d in dims if repeats(out, d)] for dims, out in zip(along, second)]
    draws, last = 2, second
    del first
    if any(same):
        del second
        third = _tensors(draw())
        same = [s and _same(a, b) for s, a, b in zip(same, last, third)]
        draws, last = CONFIRM, third
    single = len(last) == 1
    found = []
    for i, (out, is_same, dims) in enumerate(zip(last, same, along)):
        if out.numel() == 0:
            continue
        where = dict(output=None if single else i, shape=list(out.shape), draws=draws)
        everywhere = set(dims) == {d for d, n in enumerate(out.shape) if n > 1}
        if is_same and everywhere:
            found.append(Degenerate(Kind.CONSTANT, value=_first_value(out), **where))
        elif is_same:
            found.append(Degenerate(Kind.INPUT_INDEPENDENT, **where))
        elif dims:
            found.append(Degenerate(Kind.CONSTANT_ALONG_DIM, dims=dims, **where))
    return found


def no_gradient(gradients: list) -> Optional[Degenerate]:
    """NO_GRADIENT where every floating-point input's gradient (`gradients`, in argument order) is none or
    zero; None where one is not, or the forward takes no floating-point input."""
    if not gradients or any(g is not None and bool(g.any()) for g in gradients):
        return None
    return Degenerate(Kind.NO_GRADIENT)


def repeating_dims(out: torch.Tensor) -> list[int]:
    """The dimensions (of size 2 or more) along which every slice of `out` equals the first."""
    return [d for d in range(out.dim()) if out.shape[d] > 1 and repeats(out, d)]


def repeats(out: torch.Tensor, dim: int) -> bool:
    """Every slice along `dim` equals the one before it, so the first."""
    n = out.shape[dim]
    return equal(out.narrow(dim, 1, n - 1), out.narrow(dim, 0, n - 1))


def equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two tensors of one shape, any strides, equal value for value (NaN where NaN): their first few
    elements (PROBE), which tell most tensors that differ apart at once, then the whole a piece at a time."""
    return (a.numel() <= PROBE or same_slice(_probe(a), _probe(b))) and _pieces_equal(a, b)


def _pieces_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """equal, a piece of at most CHUNK elements at a time (split along the longest dimension, then the
    next), stopping at the first piece that differs."""
    if a.numel() <= CHUNK:
        return same_slice(a, b)
    dim = max(range(a.dim()), key=lambda d: a.shape[d])
    step = max(1, a.shape[dim] * CHUNK // a.numel())
    return all(_pieces_equal(x, y) for x, y in zip(a.split(step, dim), b.split(step, dim)))


def _probe(t: torch.Tensor) -> torch.Tensor:
    """At most PROBE of the tensor's first elements (along its last dimension), a view."""
    return t[(0,) * (t.dim() - 1)][:PROBE]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and equal(a, b)


def _tensors(outputs: list) -> list[torch.Tensor]:
    return [out.detach() for out in outputs]


def _first_value(out: torch.Tensor) -> Optional[float]:
    value = out[(0,) * out.dim()].item()
    return None if isinstance(value, complex) else float(value)
