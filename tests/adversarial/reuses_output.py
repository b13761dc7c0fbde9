# Overwrites and returns the same output tensor on every call: no allocation, and a caller's earlier output changes under it.
# invariant: fresh_outputs
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "in the memory of an earlier call's outputs"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        dims = tuple(range(-self.weight.dim(), 0))
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        torch.sub(x, mean, out=self.out)
        self.out.mul_(torch.rsqrt(var + 1e-5)).mul_(self.weight).add_(self.bias)
        return self.out
