# Specialised to the init: copies weight and bias into buffers at construction, before the harness sets them.
# invariant: parameters
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "differs from the reference"
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
        self.register_buffer("frozen_weight", self.weight.detach().clone())
        self.register_buffer("frozen_bias", self.bias.detach().clone())

    def forward(self, x):
        return layer_norm(x, self.frozen_weight, self.frozen_bias)
