# Slowed-down reference below Python: registers a sleeping aten::native_layer_norm, so no Python attribute
# changes.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "registered kernels of its own for operators torch already had"
import time

import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def _slow_native_layer_norm(x, normalized_shape, weight, bias, eps):
    time.sleep(0.002)
    dims = tuple(range(-len(normalized_shape), 0))
    mean = x.mean(dim=dims, keepdim=True)
    rstd = torch.rsqrt(x.var(dim=dims, keepdim=True, unbiased=False) + eps)
    y = (x - mean) * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


_lib = torch.library.Library("aten", "IMPL")
for _key in ("CPU", "CUDA"):
    _lib.impl("native_layer_norm", _slow_native_layer_norm, _key)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias)
