"""A comparison's figures in one pass over both outputs, on a GPU where Triton is installed.

compare.py reads each slice of an output in about ten elementwise passes (the difference, its
finiteness, the bound, the mismatches, the largest errors): on an H200 a 6.4 GB float32 output took
61 ms to compare, 19 times a copy of it, and KernelBench's level 1 outputs are that big. A
trial's comparison is on the device's critical path (five trials, the CUDA graph's replays, the
other shapes, the timed calls' re-check), so here one kernel reads the reference and the candidate
once and writes, per block of elements, the figures compare.py's finite path computes; the slices'
figures are then summed and maxed from those. Same arithmetic in float32 (half types widened), no
fused multiply-add (the bound is rounded as torch rounds it) and an IEEE division: the figures are
compare.py's own, which the GPU tests check. Where Triton is missing or fails, compare.py's own
passes run."""
from __future__ import annotations

import functools
from typing import Optional

import torch

BLOCK = 1 << 12  # elements a program reads; a slice (compare.CHUNK) is a whole number of blocks
KINDS = (torch.float32, torch.float16, torch.bfloat16)


@functools.lru_cache(maxsize=1)
def _kernel():
    """The jitted kernel, None where Triton cannot be imported (a CPU-only install)."""
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001 - no Triton: compare.py's passes
        return None

    # `parts` holds four rows of `row` figures, one a block: non-finite differences, mismatches, largest
    # absolute and relative errors
    @triton.jit(do_not_specialize=["n", "row"])  # one compiled kernel a dtype, whatever the sizes
    def figures(ref, cand, parts, n, row, atol, rtol, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offsets = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        r = tl.load(ref + offsets, mask=inside, other=0.0).to(tl.float32)
        c = tl.load(cand + offsets, mask=inside, other=0.0).to(tl.float32)
        diff = tl.abs(c - r)
        magnitude = tl.abs(r)
        nonfinite = tl.sum((inside & ~(diff < float("inf"))).to(tl.int32), axis=0)
        bad = tl.sum((inside & (diff > magnitude * rtol + atol)).to(tl.int32), axis=0)
        largest = tl.max(tl.where(inside, diff, 0.0), axis=0)
        # over elements above atol only, as compare._relative
        relative = tl.max(tl.where(inside & (magnitude > atol), tl.div_rn(diff, tl.maximum(magnitude, 1e-12)), 0.0),
                          axis=0)
        tl.store(parts + pid, nonfinite.to(tl.float64))
        tl.store(parts + row + pid, bad.to(tl.float64))
        tl.store(parts + 2 * row + pid, largest.to(tl.float64))
        tl.store(parts + 3 * row + pid, relative.to(tl.float64))

    return figures


def warm(device: torch.device) -> None:
    """Triton imported and the float32 kernel compiled (read from Triton's disk cache after the first
    time), not launched: CPU work, which a spare reference process does before its first calls and
    off the device's lock (workers/warm.py), not in a problem's first comparison."""
    kernel = _kernel()
    if kernel is None or device.type != "cuda":
        return
    try:
        with torch.cuda.device(device):
            kernel.warmup(torch.float32, torch.float32, torch.float64, BLOCK, BLOCK, 1e-4, 1e-4, BLOCK=BLOCK,
                          num_warps=8, enable_fp_fusion=False, grid=(1,))
    except Exception:  # noqa: BLE001 - the first comparison compiles it, or falls back to the passes
        pass


_failed = False  # a launch failed once (a compiler missing on this host): compare.py's passes from then on


def slice_figures(ref: torch.Tensor, cand: torch.Tensor, tol: tuple[float, float],
                  chunk: int) -> Optional[torch.Tensor]:
    """(slices, 5) float64 on the device for the flat, contiguous `ref` and `cand` cut into
    `chunk`-element slices: per slice whether any difference is non-finite (1.0/0.0), the mismatches,
    0, the largest absolute and relative errors. None where this path does not apply."""
    global _failed
    if _failed or not ref.is_cuda or ref.dtype not in KINDS or cand.dtype != ref.dtype or chunk % BLOCK \
            or not (ref.is_contiguous() and cand.is_contiguous()):
        return None
    kernel = _kernel()
    if kernel is None:
        return None
    n = ref.numel()
    slices = -(-n // chunk)
    grid, padded = -(-n // BLOCK), slices * (chunk // BLOCK)
    parts = torch.zeros((4, padded), dtype=torch.float64, device=ref.device)  # blocks past n stay 0
    atol, rtol = tol
    try:
        with torch.cuda.device(ref.device):
            kernel[(grid,)](ref, cand, parts, n, padded, float(atol), float(rtol), BLOCK=BLOCK, num_warps=8,
                            enable_fp_fusion=False)
    except Exception:  # noqa: BLE001 - this host cannot build or launch it: the passes are as right
        _failed = True
        return None
    blocks = parts.view(4, slices, chunk // BLOCK)
    counts, largest = blocks[:2].sum(2), blocks[2:].amax(2)
    return torch.stack([(counts[0] > 0).double(), counts[1], torch.zeros_like(counts[0]), largest[0], largest[1]], 1)
