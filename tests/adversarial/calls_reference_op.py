# Calls the reference op itself: F.layer_norm, which is all the reference does, dressed up as a custom model.
# Read from the source: the default policy lets it run with a warning, the strict one refuses it unrun.
# invariant: static_policy
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: correct "calls the reference op itself"
# expect[strict]: rejected "calls the reference op itself"
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
