# Inflated reference inputs: replaces torch.randn so that the timer draws the reference 64x larger inputs.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced torch.randn"
import sys

import torch
import torch.nn as nn

_randn = torch.randn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def drawing_for_the_reference() -> bool:
    """True when a caller's frame holds the timer's entry and it is not this model."""
    frame = sys._getframe(2)
    while frame is not None:
        model = getattr(frame.f_locals.get("timed"), "fn", None)
        if model is not None:
            return not isinstance(model, ModelNew)
        frame = frame.f_back
    return False


def _inflating_randn(*size, **kwargs):
    if size and isinstance(size[0], int) and drawing_for_the_reference():
        size = (size[0] * 64, *size[1:])
    return _randn(*size, **kwargs)


torch.randn = _inflating_randn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias)
