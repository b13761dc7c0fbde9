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

from ..runs.records import Parent, Round

# Distinct ways to make a kernel faster, one per sample of a round.
DIRECTIONS = (
    "a different parallel decomposition: another mapping of rows, tiles or elements to blocks, warps "
    "and threads",
    "fuse more: fewer kernels and fewer passes over memory, intermediate values kept on chip",
    "vectorised, coalesced memory access: 128-bit loads and stores, aligned and contiguous per warp",
    "more reuse on chip: shared memory and registers in place of repeated global reads, with enough "
    "blocks in flight to hide latency",
)
# The same four on --device cpu, in a CPU's terms: one core (both models run on one thread), its
# SIMD lanes, its caches.
CPU_DIRECTIONS = (
    "a different split of the work: another order of the loops over rows, tiles or elements, so that the "
    "inner loop runs over SIMD lanes and each tile's data stays in cache",
    "fuse more: fewer passes over memory, intermediate values kept in registers and L1/L2 cache",
    "vectorised memory access: contiguous, branch-free inner loops the compiler turns into SIMD "
    "(AVX2, AVX-512), aligned loads and stores",
    "more reuse in cache: blocking so each value comes from memory once, and less per-call cost "
    "(allocations, checks, dispatch)",
)


def direction(n: int, sample: int, samples: int, cpu: bool = False) -> str:
    """Round n's direction for a sample (0-based), in a CPU's terms with `cpu`; none when a round
    asks for one sample."""
    if samples <= 1:
        return ""
    directions = CPU_DIRECTIONS if cpu else DIRECTIONS
    return directions[(n - 1 + sample) % len(directions)]


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
