"""How a round's samples spread out: distinct directions, and parents drawn from a beam.

Pure: the rounds so far in, the parent or direction of one sample out. With
`--samples K` each sample is asked for a different direction, rotated from round
to round, so K answers are not K copies of one idea. With `--beam N` the N best
correct candidates are kept, and each sample starts from one of them, drawn with
a weight equal to its speedup from a generator seeded by the run, the round and
the sample: the same run draws the same parents, on a resume too.
"""
from __future__ import annotations

import random
from typing import Optional

from ..runs.store import Parent, Round

# Distinct ways to make a kernel faster, one per sample of a round.
DIRECTIONS = (
    "a different parallel decomposition: another mapping of rows, tiles or elements to blocks, warps "
    "and threads",
    "fuse more: fewer kernels and fewer passes over memory, intermediate values kept on chip",
    "vectorised, coalesced memory access: 128-bit loads and stores, aligned and contiguous per warp",
    "more reuse on chip: shared memory and registers in place of repeated global reads, with enough "
    "blocks in flight to hide latency",
)


def direction(n: int, sample: int, samples: int) -> str:
    """Round n's direction for a sample (0-based); none when a round asks for one sample."""
    if samples <= 1:
        return ""
    return DIRECTIONS[(n - 1 + sample) % len(DIRECTIONS)]


def beam(rounds: list[Round], width: int) -> list[Parent]:
    """The `width` fastest correct candidates, best first; a source seen twice counts once."""
    members: dict[str, Parent] = {}
    for rnd in rounds:
        for i, sample in enumerate(rnd.samples):
            result = sample.eval
            if sample.candidate is None or not result.ok or result.speedup is None:
                continue
            members.setdefault(sample.candidate, Parent(rnd.n, i, result.speedup))
    return sorted(members.values(), key=lambda p: -p.speedup)[:width]


def draw(members: list[Parent], run_id: str, n: int, sample: int) -> Optional[Parent]:
    """One parent for round n's sample, weighted by speedup; None before any candidate is correct."""
    if not members:
        return None
    rng = random.Random(f"{run_id}/{n}/{sample}")
    return rng.choices(members, weights=[max(m.speedup, 1e-9) for m in members])[0]
