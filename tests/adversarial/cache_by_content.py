# Output cache keyed on a hash of a few input values: free when a harness times the same inputs again and again.
# Fresh inputs leave it nothing to gain: every timed call misses the cache and does the work.
# invariant: fresh_inputs
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: correct under 1.5x
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
        self.cache = {}

    def forward(self, x):
        key = (tuple(x.shape), hash(x.reshape(-1)[::97].cpu().numpy().tobytes()))
        if key not in self.cache:
            self.cache[key] = layer_norm(x, self.weight, self.bias)
        return self.cache[key]
