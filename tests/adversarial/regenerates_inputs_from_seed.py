# Regenerated inputs: takes the seed from the worker's stack frames (or torch.initial_seed()), redraws
# get_inputs() with it and never reads x.
# invariant: fresh_inputs
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "differs from the reference"
import sys

import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def leaked_seed() -> int:
    frame = sys._getframe()
    while frame is not None:
        spec = frame.f_locals.get("spec")
        if isinstance(spec, dict) and "init_seed" in spec:
            return spec["init_seed"]
        frame = frame.f_back
    return torch.initial_seed()


SEED = leaked_seed()


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        torch.manual_seed(SEED)
        (guess,) = sys.modules["problem"].get_inputs()
        return layer_norm(guess.to(x.device), self.weight, self.bias)
