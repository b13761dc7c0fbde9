"""Comparing a candidate's outputs with the reference's.

Runs in the reference process, on outputs the candidate's process sent as
plain tensors. Checks, in order: number and structure of outputs, type, shape,
dtype and device, non-finite values where the reference is finite, then
allclose with per-dtype tolerances.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ...problem import widened
from ...results import CheckResult, as_list
from ..processes.channel import Unsupported
from . import fused


def _device_kind(device: str) -> str:
    return device.split(":")[0]


def compare(reference: Any, candidate: Any, candidate_devices: list[str],
            tolerances: Callable[[str], tuple[float, float]], labels: Optional[list[str]] = None,
            first_gradient: Optional[int] = None,
            grad_tolerances: Optional[Callable[[str], tuple[float, float]]] = None,
            allowance: Optional[list[float]] = None, slack: Optional[list[float]] = None) -> CheckResult:
    """One trial's verdict. `candidate_devices` are where the candidate's tensors lived. Under
    --backward (workers/backward.py) `labels` name each entry, and entries from `first_gradient`
    on are gradients, compared at `grad_tolerances`, each atol plus its `allowance` (the
    reference's own rounding, backward.rounding_allowance). `slack`: each output's atol plus this
    (against a float64 reference, eager's own error: precision.Exact.slack)."""
    refs, cands = as_list(reference), as_list(candidate)
    if len(refs) != len(cands):
        return CheckResult(False, reasons=[
            f"expected {len(refs)} output(s), the candidate returned {len(cands)}"])
    result = CheckResult(True)
    devices = iter(candidate_devices)
    for i, (ref, cand) in enumerate(zip(refs, cands)):
        label = labels[i] if labels else f"output {i}" if len(refs) > 1 else "the output"
        gradient = first_gradient is not None and i >= first_gradient
        if gradient and (ref is None or cand is None):
            # no gradient where the reference has none is right, and so are zeros
            if ref is None and isinstance(cand, torch.Tensor):
                next(devices, "?")
                if bool(cand.any()):
                    return CheckResult(False, reasons=[f"{label} is nonzero where the reference has none"])
            elif ref is not None:
                return CheckResult(False, reasons=[f"{label} is missing (None) where the reference has one: "
                                                   "the backward does not reach it"])
            continue
        if not isinstance(ref, torch.Tensor):
            if cand != ref:
                return CheckResult(False, reasons=[f"{label} is {cand!r}, expected {ref!r}"])
            continue
        if isinstance(cand, Unsupported) or not isinstance(cand, torch.Tensor):
            kind = cand.type_name if isinstance(cand, Unsupported) else type(cand).__name__
            return CheckResult(False, reasons=[f"{label} is a {kind}, expected a plain torch.Tensor"])
        device = next(devices, "?")
        problems = []
        if tuple(cand.shape) != tuple(ref.shape):
            problems.append(f"shape {tuple(cand.shape)} where the reference has {tuple(ref.shape)}")
        if cand.dtype != ref.dtype:
            problems.append(f"dtype {cand.dtype} where the reference has {ref.dtype}")
        if _device_kind(device) != ref.device.type:
            problems.append(f"device {device} where the reference has {ref.device}")
        if problems:
            return CheckResult(False, reasons=[f"{label} has " + "; ".join(problems)])
        tol = widened((grad_tolerances if gradient and grad_tolerances else tolerances)(
            str(ref.dtype).removeprefix("torch.")), allowance, i - first_gradient if gradient else None)
        if slack and i < len(slack):
            tol = (tol[0] + slack[i], tol[1])
        _compare_values(label, ref, cand.to(ref.device), tol, result)
        if not result.passed:
            return result
    return result


# elements compared at once: the temporaries of a comparison stay a few slices of this size,
# not several copies of a multi-GB output
CHUNK = 1 << 24


def _compare_values(label: str, ref: torch.Tensor, cand: torch.Tensor,
                    tol: tuple[float, float], result: CheckResult) -> None:
    if ref.numel() == 0:
        return
    refs, cands = ref.reshape(-1), cand.reshape(-1)
    slices = [(refs[start:start + CHUNK], cands[start:start + CHUNK]) for start in range(0, refs.numel(), CHUNK)]
    # Each slice's figures stay on the device until the last slice is queued: one wait for them all,
    # not four a slice. A slice holding a non-finite difference is read again the exact way.
    figures = fused.slice_figures(refs, cands, tol, CHUNK)
    if figures is None:
        figures = torch.stack([torch.stack(_finite_figures(r, c, tol)).double() for r, c in slices])
    on_host = figures.tolist()
    counts, nonfinite, largest_abs, largest_rel = [], 0, 0.0, 0.0
    for (r, c), (special, *found) in zip(slices, on_host):
        bad, nan, abs_error, rel_error = [float(v) for v in _exact_figures(r, c, tol)] if special else found
        counts.append(int(bad))
        nonfinite += int(nan)
        largest_abs = max(largest_abs, abs_error)
        if rel_error == rel_error:  # a slice whose reference holds a NaN gives none
            largest_rel = max(largest_rel, rel_error)
    result.max_abs_error = max(result.max_abs_error, largest_abs)
    result.max_rel_error = max(result.max_rel_error, largest_rel)
    mismatches = sum(counts)
    atol, rtol = tol
    if nonfinite:
        result.reasons.append(f"{label} has {nonfinite} non-finite value(s) where the reference is finite")
    if mismatches:
        first = next(i for i, count in enumerate(counts) if count)
        flat = first * CHUNK + int(_mismatched(*slices[first], tol).nonzero()[0, 0])
        result.passed = False
        result.mismatch_share = mismatches / ref.numel()
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape))
        result.first_bad_index = list(index)
        result.reasons.append(
            f"{label} differs from the reference in {mismatches} of {ref.numel()} elements "
            f"({result.mismatch_share:.2%}); first at index {list(index)}: "
            f"got {cand[index].item():.6g}, expected {ref[index].item():.6g} "
            f"(atol={atol:g}, rtol={rtol:g})")


def _floats(ref: torch.Tensor, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Half types are compared in float32 so the error figures are not rounded away; integers in float64."""
    if not ref.dtype.is_floating_point:
        return ref.to(torch.float64), cand.to(torch.float64)
    return (ref, cand) if ref.dtype in (torch.float32, torch.float64) else (ref.float(), cand.float())


def _mismatched(ref: torch.Tensor, cand: torch.Tensor, tol: tuple[float, float]) -> torch.Tensor:
    """Where one slice differs: torch.isclose's rule (NaN equal to NaN), exact for integers."""
    if not ref.dtype.is_floating_point:
        return cand != ref
    r, c = _floats(ref, cand)
    atol, rtol = tol
    return ~torch.isclose(c, r, rtol=rtol, atol=atol, equal_nan=True)


def _finite_figures(ref: torch.Tensor, cand: torch.Tensor, tol: tuple[float, float]) -> list[torch.Tensor]:
    """One slice's figures in few passes over it, right where every difference is finite (no NaN or
    infinity on either side): whether it is not, how many elements differ, how many are non-finite
    where the reference is finite (none then), the largest absolute and relative errors."""
    r, c = _floats(ref, cand)
    diff = torch.sub(c, r).abs_()
    special, none = ~torch.isfinite(diff).all(), diff.new_zeros(())
    if not ref.dtype.is_floating_point:  # counted as they are: float64 rounds integers past 2**53
        return [special, _mismatched(ref, cand, tol).sum(), none, diff.max(), none]
    atol, rtol = tol
    magnitude = r.abs()
    bad = diff > magnitude * rtol + atol
    return [special, bad.sum(), none, diff.max(), _relative(diff, magnitude, atol)]


def _relative(diff: torch.Tensor, magnitude: torch.Tensor, atol: float) -> torch.Tensor:
    """The largest relative error where the reference's magnitude is above the absolute tolerance: below it
    the absolute part decides, and a ratio over a near-zero reference (1e4 on an honest kernel) says nothing.
    0 where no element is above it."""
    return torch.where(magnitude > atol, diff / magnitude.clamp_min(1e-12), 0.0).max()


def _exact_figures(ref: torch.Tensor, cand: torch.Tensor, tol: tuple[float, float]) -> list[torch.Tensor]:
    """_finite_figures' figures for a slice with NaN or infinity in it (a floating-point one: integers
    are finite)."""
    bad = _mismatched(ref, cand, tol)
    r, c = _floats(ref, cand)
    nonfinite = (~torch.isfinite(c) & torch.isfinite(r)).sum()
    diff = (c - r).abs_().nan_to_num_(nan=0.0, posinf=0.0)
    return [bad.sum(), nonfinite, diff.max(), _relative(diff, r.abs(), tol[0])]
