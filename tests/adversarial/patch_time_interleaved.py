# Monkeypatched harness.timing.time_interleaved (through sys.modules): reports the candidate 100x faster.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced harness.timing.time_interleaved"
import sys

import torch
import torch.nn as nn

_timing = sys.modules.get("harness.engine.timing.clock")
if _timing is not None:
    _real = _timing.time_interleaved

    def _forged(entries, device, rule):
        results = _real(entries, device, rule)
        results["candidate"].median = results["reference"].median / 100
        return results

    _timing.time_interleaved = _forged


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
