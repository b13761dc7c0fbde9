# Reused freed memory: does no work and returns torch.empty, hoping to get the reference's freed output.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# problem[cuda]: problems/layernorm_4d.py
# device: cpu cuda
# expect: incorrect "differs from the reference"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
