"""A lint for problems, run where the reference runs.

A problem whose output barely depends on its inputs, is (nearly) one value
everywhere, or holds non-finite values lets a candidate pass the check without
doing the work (return a constant, compute once) and makes its speedup
meaningless. The lint runs the built reference on a few input draws and says
what it sees in sentences; it never refuses a problem.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..problem import tolerance

# std below this share of |mean| counts as barely varying, whatever the tolerances
RELATIVE_SPREAD = 1e-3


def lint_reference(model: Callable, make_inputs: Callable[[], list], runs: int = 3,
                   tolerances: Optional[dict] = None) -> list[str]:
    """Warnings about the reference's outputs over `runs` input draws.

    `make_inputs` draws one input set from a fresh seed; `tolerances` maps a
    dtype name ("float32", ...) and "default" to (atol, rtol), as the check
    uses them. Only the first draw is kept: big problems stay affordable."""
    tolerances = tolerances or {"default": (1e-4, 1e-4)}
    runs = max(2, runs)
    first_inputs = list(make_inputs())
    first = _outputs(model, first_inputs)
    same_inputs, same_outputs = True, [True] * len(first)
    for _ in range(runs - 1):
        inputs = list(make_inputs())
        outputs = _outputs(model, inputs)
        same_inputs = same_inputs and _equal_inputs(first_inputs, inputs)
        same_outputs = [same and _close(a, b, tolerance(tolerances, str(a.dtype)))
                        for same, a, b in zip(same_outputs, first, outputs)]
    warnings = []
    if same_inputs:
        warnings.append(f"get_inputs() gave the same inputs on {runs} draws from different seeds: every trial "
                        "checks the same case.")
    for i, out in enumerate(first):
        label = "The output" if len(first) == 1 else f"Output {i}"
        atol, rtol = tolerance(tolerances, str(out.dtype))
        said = _value_warnings(label, out, (atol, rtol))
        warnings.extend(said)
        if not said and same_outputs[i] and not same_inputs:
            warnings.append(f"{label} barely depends on the inputs: {runs} random input draws gave outputs equal "
                            f"within atol={atol:g}, rtol={rtol:g}, so a candidate can compute it once and return it.")
    return warnings


def _outputs(model: Callable, inputs: list) -> list[torch.Tensor]:
    with torch.no_grad():
        output = model(*inputs)
    values = list(output) if isinstance(output, (list, tuple)) else [output]
    return [v.detach() for v in values if isinstance(v, torch.Tensor)]



def _equal_inputs(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y.to(x.device)):
                return False
        elif x != y:
            return False
    return True


def _close(a: torch.Tensor, b: torch.Tensor, tol: tuple[float, float]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    return torch.allclose(b.float(), a.float(), atol=tol[0], rtol=tol[1], equal_nan=True)


def _value_warnings(label: str, out: torch.Tensor, tol: tuple[float, float]) -> list[str]:
    """Non-finite values, and one value everywhere, in one output."""
    if out.numel() == 0:
        return []
    values = out.float() if out.dtype.is_floating_point else out.to(torch.float64)
    warnings = []
    finite = torch.isfinite(values)
    bad = int((~finite).sum())
    if bad:
        warnings.append(f"{label} holds {bad} non-finite value(s) of {out.numel()} on random inputs: the check "
                        "cannot tell a right answer from a wrong one there.")
        values = values[finite]
    if values.numel() < 2:
        return warnings
    std, mean = (float(v) for v in torch.std_mean(values, unbiased=False))
    atol, rtol = tol
    if std == 0.0:
        warnings.append(f"{label} is the same value everywhere ({mean:g}): a candidate that returns that constant "
                        "passes the check.")
    elif bool(((values - mean).abs() <= atol + rtol * abs(mean)).all()):
        warnings.append(f"{label} is nearly the same value everywhere (mean {mean:g}, std {std:.3g}): returning "
                        f"the mean everywhere passes the check at atol={atol:g}, rtol={rtol:g}.")
    elif std <= RELATIVE_SPREAD * abs(mean):
        warnings.append(f"{label} is nearly the same value everywhere (mean {mean:g}, std only "
                        f"{std / abs(mean):.1e} of it): a constant comes close to passing the check.")
    return warnings
