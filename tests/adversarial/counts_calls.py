# Call counting: right for the first 8 calls (the correctness trials), then an uninitialised tensor, so timed calls
# cost nothing.
# invariant: checked_calls
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "while being timed"
import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 8:
            return torch.empty_like(x)
        return layer_norm(x, self.weight, self.bias)
