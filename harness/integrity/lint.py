"""A lint for problems, run where the reference runs.

A problem whose output barely depends on its inputs, is (nearly) one value
everywhere, or holds non-finite values lets a candidate pass the check without
doing the work (return a constant, compute once) and makes its speedup
meaningless. The lint runs the built reference on a few input draws and says
what it sees in sentences; it never refuses a problem.
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch

from ..problem import tolerance
from .digest import CHUNK, checksum

# std below this share of |mean| counts as barely varying, whatever the tolerances
RELATIVE_SPREAD = 1e-3


def lint_reference(model: Callable, make_inputs: Callable[[], list], runs: int = 3,
                   tolerances: Optional[dict] = None) -> list[str]:
    """Warnings about the reference's outputs over `runs` input draws.

    `make_inputs` draws one input set from a fresh seed; `tolerances` maps a
    dtype name ("float32", ...) and "default" to (atol, rtol), as the check
    uses them. Only the first draw's outputs and every draw's checksum are kept, each
    draw's inputs freed before the next: big problems stay affordable."""
    tolerances = tolerances or {"default": (1e-4, 1e-4)}
    runs = max(2, runs)
    inputs = list(make_inputs())
    first_sum = checksum(inputs)
    first = _outputs(model, inputs)
    same_inputs, same_outputs = True, [True] * len(first)
    for _ in range(runs - 1):
        del inputs
        inputs = list(make_inputs())
        outputs = _outputs(model, inputs)
        same_inputs = same_inputs and checksum(inputs) == first_sum
        same_outputs = [same and _close(a, b, tolerance(tolerances, str(a.dtype)))
                        for same, a, b in zip(same_outputs, first, outputs)]
        del outputs
    del inputs
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



def draws_random(model: Callable, inputs: list, restore: Callable[[], None]) -> Optional[str]:
    """A warning if the reference's outputs depend on the random generator: the same inputs,
    from the same module state, give different outputs under two seeds and the same under one.

    The harness reseeds before every call, so a copy of the reference passes; a kernel
    passes only if it draws the same numbers in the same order as PyTorch's generator."""
    runs = []
    for seed in (1, 2, 1):
        restore()
        torch.manual_seed(seed)
        runs.append(_outputs(model, inputs))
        if len(runs) == 2 and _identical(runs[0], runs[1]):
            return None
        if len(runs) == 2:
            runs[1] = None  # only the first is compared again
    if not _identical(runs[0], runs[2]):
        return None  # it changes from call to call whatever the seed: not the generator's doing
    return ("Model.forward draws random numbers (dropout in training mode, torch.rand, bernoulli, ...): on the "
            "same inputs it gives different outputs under different generator seeds. The harness reseeds before "
            "every call, so a copy of Model passes, but a kernel matches only if it draws the same numbers in the "
            "same order as PyTorch's generator. For an inference kernel evaluate with --model-mode eval (dropout "
            "off), or set the dropout probability to 0 in the problem.")


def _identical(a: list, b: list) -> bool:
    return len(a) == len(b) and all(map(identical, a, b))


def identical(a, b) -> bool:
    """Bit for bit the same output, NaN where NaN."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and all(map(_same_slice, _slices(a), _slices(b)))
    return a == b


def _slices(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensor's elements CHUNK at a time: on a GPU, equal, isclose, allclose and isfinite hold
    temporaries the size of (or several times) what they are given, here a slice, not a whole output."""
    flat = t.reshape(-1)
    return (flat[i:i + CHUNK] for i in range(0, flat.numel(), CHUNK))


def _same_slice(a: torch.Tensor, b: torch.Tensor) -> bool:
    # NaN (unequal to itself) needs the slower look
    return torch.equal(a, b) or (a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0,
                                                                              equal_nan=True).all()))


def _close(a: torch.Tensor, b: torch.Tensor, tol: tuple[float, float]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    return all(torch.allclose(y.float(), x.float(), atol=tol[0], rtol=tol[1], equal_nan=True)
               for x, y in zip(_slices(a), _slices(b)))


def _value_warnings(label: str, out: torch.Tensor, tol: tuple[float, float]) -> list[str]:
    """Non-finite values, and one value everywhere, in one output."""
    if out.numel() == 0:
        return []
    values = out.float() if out.dtype.is_floating_point else out.to(torch.float64)
    warnings = []
    bad = sum(int((~torch.isfinite(piece)).sum()) for piece in _slices(values))
    if bad:
        warnings.append(f"{label} holds {bad} non-finite value(s) of {out.numel()} on random inputs: the check "
                        "cannot tell a right answer from a wrong one there.")
        values = values[torch.isfinite(values)]
    if values.numel() < 2:
        return warnings
    std, mean = (float(v) for v in torch.std_mean(values, unbiased=False))
    atol, rtol = tol
    if std == 0.0:
        warnings.append(f"{label} is the same value everywhere ({mean:g}): a candidate that returns that constant "
                        "passes the check.")
    # every value within the tolerance of the mean: the extremes are, which needs no temporary
    elif max(float(values.max()) - mean, mean - float(values.min())) <= atol + rtol * abs(mean):
        warnings.append(f"{label} is nearly the same value everywhere (mean {mean:g}, std {std:.3g}): returning "
                        f"the mean everywhere passes the check at atol={atol:g}, rtol={rtol:g}.")
    elif std <= RELATIVE_SPREAD * abs(mean):
        warnings.append(f"{label} is nearly the same value everywhere (mean {mean:g}, std only "
                        f"{std / abs(mean):.1e} of it): a constant comes close to passing the check.")
    return warnings
