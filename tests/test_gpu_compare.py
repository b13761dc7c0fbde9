"""On a GPU: the one-pass comparison (checking/fused.py) gives compare.py's own figures and verdicts,
for each dtype it takes, across slices, with mismatches, NaN and infinities in them."""
import pytest
import torch

from harness.engine.checking import compare, fused

TOL = (1e-4, 2e-4)


def outputs(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three slices' worth and a short one: the candidate close, off by one element, or off by NaN,
    infinity and a sign in others."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    ref = torch.randn(2 * compare.CHUNK + 4099, device="cuda", generator=generator).to(dtype)
    noise = torch.randn(ref.shape, device="cuda", generator=generator) * 5e-5
    return ref, (ref.float() * (1 + noise)).to(dtype)


def cases(dtype: torch.dtype):
    ref, cand = outputs(dtype, 1)
    yield "close", ref, cand
    off = cand.clone()
    off[compare.CHUNK + 17] += 1
    yield "one off", ref, off
    odd = cand.clone()
    odd[3], odd[compare.CHUNK + 5], odd[-1] = float("nan"), float("inf"), -odd[-1] - 1
    yield "non-finite", ref, odd
    both = ref.clone()
    both[9] = float("inf")
    same = both.clone()
    yield "infinite in both", both, same


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", fused.KINDS, ids=str)
def test_one_pass_figures_are_the_passes_figures(dtype, monkeypatch):
    pytest.importorskip("triton")
    for name, ref, cand in cases(dtype):
        flat = ref.reshape(-1), cand.reshape(-1)
        assert fused.slice_figures(*flat, TOL, compare.CHUNK) is not None, "Triton is here: the one pass runs"
        one_pass = compare.compare(ref, cand, ["cuda:0"], lambda d: TOL)
        monkeypatch.setattr(fused, "_failed", True)  # compare.py's passes
        passes = compare.compare(ref, cand, ["cuda:0"], lambda d: TOL)
        monkeypatch.setattr(fused, "_failed", False)
        assert one_pass == passes, name
    assert not fused._failed
