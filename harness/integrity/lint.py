"""A lint for problems, run where the reference runs.

A problem whose output barely depends on its inputs, is (nearly) one value
everywhere, or holds non-finite values lets a candidate pass the check without
doing the work (return a constant, compute once) and makes its speedup
meaningless. The lint runs the built reference on a few input draws and says
what it sees in sentences; it never refuses a problem.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

import torch

from ..problem import tolerance
from .digest import CHUNK, checksum

# std below this share of |mean| counts as barely varying, whatever the tolerances
RELATIVE_SPREAD = 1e-3
RUNS = 3  # input draws the lint looks at


def lint_reference(model: Callable, make_inputs: Callable[[], list], runs: int = RUNS,
                   tolerances: Optional[dict] = None) -> list[str]:
    """Warnings about the reference's outputs over `runs` input draws.

    `make_inputs` draws one input set from a fresh seed; `tolerances` maps a
    dtype name ("float32", ...) and "default" to (atol, rtol), as the check
    uses them. Each draw's inputs are freed before the next (Draws keeps the first
    draw's outputs only): big problems stay affordable."""
    draws = Draws(runs, tolerances)
    while draws.warnings is None:
        inputs = list(make_inputs())
        draws.add(checksum(inputs), _outputs(model, inputs))
        del inputs
    return draws.warnings


class Draws:
    """The lint's look at `runs` input draws, taken one at a time wherever the reference runs on
    fresh ones (the check's first trials, or lint_reference's own draws): the first draw's outputs
    and every draw's input checksum are kept until the last, then only the warnings."""

    def __init__(self, runs: int = RUNS, tolerances: Optional[dict] = None):
        self.runs, self.tolerances = max(2, runs), tolerances or {"default": (1e-4, 1e-4)}
        self.first: Optional[list[torch.Tensor]] = None
        self.first_sum: Optional[list] = None
        self.same_inputs, self.same_outputs = True, []
        self.made = 0
        self.warnings: Optional[list[str]] = None  # once the last draw is in
        self.seconds = 0.0  # spent looking at the draws (their forwards are the caller's)

    def add(self, inputs_sum: list, output) -> None:
        """One draw: its inputs' checksum (integrity/digest.py) and the reference's output for them."""
        started = time.monotonic()
        outputs = _tensors(output)
        if self.first is None:
            self.first, self.first_sum, self.same_outputs = outputs, inputs_sum, [True] * len(outputs)
        else:
            self.same_inputs = self.same_inputs and inputs_sum == self.first_sum
            self.same_outputs = [same and _close(a, b, tolerance(self.tolerances, str(a.dtype)))
                                 for same, a, b in zip(self.same_outputs, self.first, outputs)]
        self.made += 1
        if self.made >= self.runs:
            self.warnings, self.first = self._said(), None
        self.seconds += time.monotonic() - started

    def _said(self) -> list[str]:
        runs, first = self.runs, self.first
        warnings = []
        if self.same_inputs:
            warnings.append(f"get_inputs() gave the same inputs on {runs} draws from different seeds: every trial "
                            "checks the same case.")
        for i, out in enumerate(first):
            label = "The output" if len(first) == 1 else f"Output {i}"
            atol, rtol = tolerance(self.tolerances, str(out.dtype))
            said = _value_warnings(label, out, (atol, rtol))
            warnings.extend(said)
            if not said and self.same_outputs[i] and not self.same_inputs:
                warnings.append(f"{label} barely depends on the inputs: {runs} random input draws gave outputs "
                                f"equal within atol={atol:g}, rtol={rtol:g}, so a candidate can compute it once and "
                                "return it.")
        return warnings


def _tensors(output) -> list[torch.Tensor]:
    """A forward's tensor outputs, detached, as the lint reads them."""
    values = list(output) if isinstance(output, (list, tuple)) else [output]
    return [v.detach() for v in values if isinstance(v, torch.Tensor)]


def _outputs(model: Callable, inputs: list) -> list[torch.Tensor]:
    with torch.no_grad():
        return _tensors(model(*inputs))


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
        return a.shape == b.shape and a.dtype == b.dtype and all(map(same_slice, _slices(a), _slices(b)))
    return a == b


def _slices(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensor's elements CHUNK at a time: on a GPU, equal, isclose, allclose and isfinite hold
    temporaries the size of (or several times) what they are given, here a slice, not a whole output."""
    flat = t.reshape(-1)
    return (flat[i:i + CHUNK] for i in range(0, flat.numel(), CHUNK))


def same_slice(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal value for value, NaN where NaN (integrity/degenerate.py compares with it too)."""
    # NaN (unequal to itself) needs the slower look
    return torch.equal(a, b) or (a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0,
                                                                              equal_nan=True).all()))


def _close(a: torch.Tensor, b: torch.Tensor, tol: tuple[float, float]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    # allclose a slice at a time, each answer left on the device until the last slice is queued: one wait,
    # not one a slice (a hundred for a 6.4 GB output, each a round trip while the other process's trial runs)
    answers = [torch.isclose(y.float(), x.float(), atol=tol[0], rtol=tol[1], equal_nan=True).all()
               for x, y in zip(_slices(a), _slices(b))]
    return not answers or bool(torch.stack(answers).all())


def _value_warnings(label: str, out: torch.Tensor, tol: tuple[float, float]) -> list[str]:
    """Non-finite values, and one value everywhere, in one output."""
    if out.numel() == 0:
        return []
    values = out.float() if out.dtype.is_floating_point else out.to(torch.float64)
    warnings = []
    bad = int(sum((~torch.isfinite(piece)).sum() for piece in _slices(values)))  # read once, as _close
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
