# Monkeypatched torch.allclose: always True, in the hope that the comparison runs in this process; forward does no work.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced torch.allclose"
import torch
import torch.nn as nn

torch.allclose = lambda *args, **kwargs: True


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return torch.empty_like(x)
