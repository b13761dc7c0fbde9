# Below the physical floor (GPU): launches nothing and returns a view of a buffer made once, faster than a read of x.
# invariant: below_floor
# problem: problems/layernorm_4d.py
# device: cuda
# expect: incorrect "differs from the reference"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.buffer = None

    def forward(self, x):
        if self.buffer is None:
            self.buffer = torch.zeros_like(x)
        return self.buffer.view(x.shape)
