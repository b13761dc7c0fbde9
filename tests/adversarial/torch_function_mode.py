# Global torch function mode entered at import and never left: every F.layer_norm (the reference's) sleeps first.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "torch function or dispatch mode"
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class SlowReference(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.layer_norm:
            time.sleep(0.002)
        return func(*args, **(kwargs or {}))


SlowReference().__enter__()


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias)
