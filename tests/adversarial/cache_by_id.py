# Output cache keyed on id(x): free while a harness passes the same tensor object, stale once Python reuses an id.
# Caught whatever the allocator does: timed calls get their inputs in the same tensors (SameTensors), so the re-check
# sees the stale output; a trial may catch it first, or the output handed back again in memory the caller still holds.
# invariant: fresh_inputs
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "while being timed" "differs from the reference" "in the memory of an earlier call's outputs"
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
        if id(x) not in self.cache:
            self.cache[id(x)] = layer_norm(x, self.weight, self.bias)
        return self.cache[id(x)]
