"""Cheap digests of tensors, made without a full-size copy.

Two processes show they drew the same inputs by exchanging a checksum, and the
candidate worker sees that a candidate changed its inputs in place by comparing
a digest taken before the call with one taken after. Both read a tensor's raw
bytes as 32-bit words and add them up per block, wrapping: integer sums are exact
in any order (the same on every device and thread count), a change to any one
element moves its block's sum, and nothing the size of the input is allocated.
"""
from __future__ import annotations

import torch

CHUNK = 1 << 24  # elements (or words) handled at once: bounds any temporary
BLOCK = 1 << 12  # words per block sum


def block_sums(value: torch.Tensor) -> torch.Tensor:
    """int32 sums (wrapping) of consecutive BLOCK-word blocks of the tensor's bytes, on its device;
    a last short block, and bytes past the last whole word, are summed apart."""
    raw = value.detach().reshape(-1).view(torch.uint8)
    whole = raw.numel() // 4 * 4
    words = raw[:whole].view(torch.int32)
    parts = []
    for start in range(0, words.numel(), CHUNK):
        piece = words[start:start + CHUNK]
        full = piece.numel() // BLOCK * BLOCK
        parts.append(piece[:full].view(-1, BLOCK).sum(1, dtype=torch.int32))
        if full < piece.numel():
            parts.append(piece[full:].sum(dtype=torch.int32).reshape(1))
    if whole < raw.numel():
        parts.append(raw[whole:].sum(dtype=torch.int32).reshape(1))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int32, device=raw.device)


def digest(values: list) -> list:
    """Per input, its block sums (a tensor), or the value itself where it is not a tensor."""
    return [block_sums(v) if isinstance(v, torch.Tensor) else v for v in values]


def totals(digests: list) -> list:
    """A number per input from its digest: the checksum two processes compare."""
    return [int(d.sum(dtype=torch.int64)) if isinstance(d, torch.Tensor) else repr(d) for d in digests]


def checksum(values: list) -> list:
    """A number per input, the same in any process that drew the same inputs on the same kind of device."""
    return totals(digest(values))


def changed(before: list, after: list) -> list[int]:
    """The indices of tensor inputs whose digest moved. Compared where they are, the answers read
    back once: beside another process's kernels a multi-GB input's digest took 1.5 ms to compare
    on an H200 and 3-4.5 ms to copy to the host and compare there (bench/digest_compare.py). A
    worker makes the comparison's first launches before its first trial (workers/candidate.py)."""
    pairs = [(i, a, b) for i, (a, b) in enumerate(zip(before, after)) if isinstance(a, torch.Tensor)]
    if not pairs:
        return []
    moved = torch.stack([(a != b).any() if a.shape == b.shape else torch.ones((), dtype=torch.bool, device=a.device)
                         for _, a, b in pairs]).tolist()
    return [i for (i, _, _), differs in zip(pairs, moved) if differs]
