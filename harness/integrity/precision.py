"""Precision judged by numbers: on one check trial, the candidate's outputs and eager float32's, each
measured against the reference run in float64 on the same inputs.

A tolerance cannot tell a float32 kernel from a lower-precision one: a TF32 or half GEMM feeding a
mean stays within float32's atol and rtol. Its error against float64 can: on KernelBench-sized GEMMs
TF32 and float16 operands are 700-1400x further from float64 than eager float32 (K 256 to 65536),
bfloat16 5000-11000x. Honest float32 kernels sum in other orders and fuse multiply-adds, and stay
within a few times eager's error: a row of 4096 summed one element after the other is 8-17x,
of 65536 33-83x, against eager's pairwise sums on the CPU (which accumulate in double). So a candidate
is held to RATIO times eager's error (at least float32's unit roundoff, for outputs eager computes
exactly), whatever made its error: flags, Triton's default `tl.dot`, casts, approximations (a
tanh GELU for an erf one is 3200x). docs/guards.md gives the figures.

The measure is the relative RMS error of each floating-point output, ||got - exact|| / ||exact||,
accumulated in float64 a chunk at a time (no float64 copy of a whole output).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Optional

import torch

from ..results import as_list

RATIO = 128.0
UNIT = 2.0 ** -24  # float32's unit roundoff: the least error eager is credited with
CHUNK = 1 << 22  # elements compared at a time


@dataclass
class Exact:
    """The reference in float64 on one trial's inputs (its outputs stay where they were made), and
    eager float32's relative error on each output (None where the output is not floating point)."""

    outputs: list
    eager: list

    def truth(self, eager: list) -> list:
        """The float64 outputs in `eager`'s dtypes, for a comparison of its kind; eager's own where they are not
        floating point (an index's ties may fall otherwise in float64)."""
        return [x.to(e.dtype) if _floating(x) and _floating(e) else e for x, e in zip(self.outputs, eager)]

    def slack(self, eager: list) -> list[float]:
        """Eager float32's largest difference from float64 on each output (0 where not floating point): what a
        comparison against truth() allows beyond its atol, so that a candidate as close as eager passes."""
        return [largest_difference(e, x) if _floating(x) and _floating(e) else 0.0 for x, e in zip(self.outputs, eager)]


def _floating(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def largest_difference(got: torch.Tensor, exact: torch.Tensor) -> float:
    """max |got - exact| in float64, a chunk at a time; infinity where either is not finite there."""
    return max((float((x - y).abs().nan_to_num(nan=math.inf).max()) for x, y in _chunks(got, exact) if x.numel()),
               default=0.0)


def _chunks(got: torch.Tensor, exact: torch.Tensor):
    """Both tensors a CHUNK of elements at a time, in float64 on `exact`'s device: no float64 copy of a whole one."""
    a, b = got.detach().reshape(-1), exact.detach().reshape(-1)
    for start in range(0, a.numel(), CHUNK):
        y = b[start:start + CHUNK].to(torch.float64)
        yield a[start:start + CHUNK].to(device=y.device, dtype=torch.float64), y


@dataclass
class Shortfall:
    """An output the candidate computed far less accurately than eager float32."""

    label: str
    candidate: float  # relative RMS error against float64
    eager: float
    ratio: float  # candidate / max(eager, UNIT)


def relative_rms(got: torch.Tensor, exact: torch.Tensor) -> Optional[float]:
    """||got - exact|| / ||exact|| in float64; None where either is not floating point, the shapes differ,
    or the exact output is all zeros."""
    if not (got.dtype.is_floating_point and exact.dtype.is_floating_point) or got.shape != exact.shape:
        return None
    diff = norm = 0.0
    for x, y in _chunks(got, exact):
        diff += float(((x - y) ** 2).sum())
        norm += float((y ** 2).sum())
    if norm == 0.0 or not math.isfinite(diff):
        return None if norm == 0.0 else math.inf
    return math.sqrt(diff / norm)


def exact_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the reference (its own parameters and buffers)."""
    return copy.deepcopy(model).double()


def as_double(values: list) -> list:
    return [v.double() if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v for v in values]


def needs_bytes(parameter_bytes: int, input_bytes: int, output_bytes: int) -> int:
    """What the float64 copies (the model's, one trial's inputs and outputs) take: twice each float32's."""
    return 2 * (parameter_bytes + input_bytes + output_bytes)


def measure(model: torch.nn.Module, doubled: list, eager: list) -> Exact:
    """The float64 reference on `doubled` (the trial's inputs in float64: as_double), and eager's error on
    each output. The list is emptied: its tensors go as soon as the forward is done with them."""
    with torch.no_grad():
        outputs = as_list(model(*doubled))
    doubled.clear()
    errors = [relative_rms(e, x) if isinstance(e, torch.Tensor) and isinstance(x, torch.Tensor) else None
              for e, x in zip(as_list(eager), outputs)]
    return Exact(outputs, errors)


def shortfall(exact: Exact, candidate: list, labels: list[str]) -> tuple[Optional[Shortfall], list[dict]]:
    """The first output whose error is past RATIO times eager's, if any; and every output's figures."""
    figures, first = [], None
    for label, got, want, eager in zip(labels, as_list(candidate), exact.outputs, exact.eager):
        if eager is None or not isinstance(got, torch.Tensor):
            continue
        error = relative_rms(got, want)
        if error is None:
            continue
        ratio = error / max(eager, UNIT)
        figures.append({"output": label, "candidate": error, "eager": eager, "ratio": ratio, "limit": RATIO})
        if first is None and ratio > RATIO:
            first = Shortfall(label, error, eager, ratio)
    return first, figures
