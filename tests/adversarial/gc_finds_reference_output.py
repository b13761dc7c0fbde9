# Reads the expected output through gc: returns any live tensor of the output's shape that is not its own input.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "differs from the reference"
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        for obj in gc.get_objects():
            if type(obj) is torch.Tensor and obj is not x and obj.shape == x.shape and obj.dtype == x.dtype:
                return obj.clone()
        return torch.empty_like(x)
