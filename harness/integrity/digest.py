"""Cheap digests of tensors, made without a full-size copy.

Two processes show they drew the same inputs by exchanging a checksum, and the
candidate worker sees that a candidate changed its inputs in place by comparing
a digest taken before the call with one taken after. Both are sums in float64
over blocks of the flattened tensor, converted a slice at a time, so the extra
memory is one slice (CHUNK elements in float64), never a float64 copy of the input.
"""
from __future__ import annotations

import torch

CHUNK = 1 << 24  # elements converted to float64 at once: 128 MB
BLOCK = 1 << 12  # elements per block sum: a change anywhere moves its block's sum


def block_sums(value: torch.Tensor) -> torch.Tensor:
    """float64 sums of consecutive BLOCK-element blocks of `value` flattened (the last may be short),
    on the tensor's device."""
    flat = value.detach().reshape(-1)
    if flat.dtype.is_complex:
        flat = torch.view_as_real(flat).reshape(-1)
    parts = []
    for start in range(0, flat.numel(), CHUNK):
        piece = flat[start:start + CHUNK].to(torch.float64)
        full = piece.numel() // BLOCK * BLOCK
        parts.append(piece[:full].view(-1, BLOCK).sum(1))
        if full < piece.numel():
            parts.append(piece[full:].sum().reshape(1))
        del piece
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=flat.device)


def digest(values: list) -> list:
    """Per input, its block sums (a tensor), or the value itself where it is not a tensor."""
    return [block_sums(v) if isinstance(v, torch.Tensor) else v for v in values]


def totals(digests: list) -> list:
    """A number per input from its digest: the checksum two processes compare."""
    return [float(d.sum()) if isinstance(d, torch.Tensor) else repr(d) for d in digests]


def checksum(values: list) -> list:
    """A number per input, the same in any process that drew the same inputs on the same kind of device."""
    return totals(digest(values))


def changed(before: list, after: list) -> list[int]:
    """The indices of tensor inputs whose digest moved (NaN-safe: a NaN block equals itself)."""
    return [i for i, (a, b) in enumerate(zip(before, after)) if isinstance(a, torch.Tensor)
            and (a.shape != b.shape or not bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all()))]
