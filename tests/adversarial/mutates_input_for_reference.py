# Mutated input: zeroes x and returns the bias, which is exactly what a reference run afterwards on the zeroed x gives.
# invariant: inputs_unchanged
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "changed its input"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        x.zero_()  # LayerNorm of a constant row is the bias
        return self.bias.expand_as(x).clone()
