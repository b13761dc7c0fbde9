# Timing detected from the stack: walks its callers' frames and skips the work when harness.engine.timing.clock calls it.
# invariant: checked_calls
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "while being timed"
import sys

import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def being_timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("timing.clock"):
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        if being_timed():
            return torch.empty_like(x)
        return layer_norm(x, self.weight, self.bias)
