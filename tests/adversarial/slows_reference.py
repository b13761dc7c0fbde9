# Slowed-down reference: replaces torch.nn.functional.layer_norm, which nn.LayerNorm calls, with a sleeping copy.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced torch.nn.functional.layer_norm"
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

_real = F.layer_norm


def _slow(*args, **kwargs):
    time.sleep(0.002)
    return _real(*args, **kwargs)


F.layer_norm = _slow


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

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias)
