# Wrong on every 20th call and right otherwise: a fault of one call in tens, met only where enough timed outputs are compared.
# Met by the floor of checked calls (scrutiny.FAST.checked_calls) where a short timing takes few.
# invariant: checked_calls
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: incorrect "while being timed"
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

_calls = itertools.count(1)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        return out + 1.0 if next(_calls) % 20 == 0 else out
