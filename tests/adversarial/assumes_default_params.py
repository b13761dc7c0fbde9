# Specialised to the init: skips weight and bias, which nn.LayerNorm initialises to 1 and 0.
# invariant: parameters
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "differs from the reference"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        dims = tuple(range(-self.weight.dim(), 0))
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5)
