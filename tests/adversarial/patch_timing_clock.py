# Monkeypatched harness.timing._perf_counter, the clock the timer captured at import: it stops while forward runs.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced harness.timing._perf_counter"
import sys
import time

import torch
import torch.nn as nn

_real = time.perf_counter
_hidden = [0.0]
_timing = sys.modules.get("harness.engine.timing.clock")
if _timing is not None:
    _timing._perf_counter = lambda: _real() - _hidden[0]


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
        start = _real()
        out = layer_norm(x, self.weight, self.bias)
        _hidden[0] += _real() - start
        return out
