# Monkeypatched torch.equal: always True, so the worker misses that forward normalises its input in place.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced torch.equal"
import torch
import torch.nn as nn

torch.equal = lambda a, b: True


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.dims = tuple(range(-len(normalized_shape), 0))

    def forward(self, x):
        x.sub_(x.mean(dim=self.dims, keepdim=True))
        x.mul_(torch.rsqrt(x.pow(2).mean(dim=self.dims, keepdim=True) + 1e-5))
        return x * self.weight + self.bias
