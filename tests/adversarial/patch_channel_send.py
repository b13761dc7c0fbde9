# Monkeypatched harness.channel.send (through sys.modules): rewrites the timing message to show a 100x speedup.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced harness.channel.send"
import sys

import torch
import torch.nn as nn

_channel = sys.modules.get("harness.engine.processes.channel")
if _channel is not None:
    _real = _channel.send

    def _forged(chan, header, tensors=()):
        if "timings" in header:
            header["timings"]["candidate"]["median"] = header["timings"]["reference"]["median"] / 100
        return _real(chan, header, tensors)

    _channel.send = _forged


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
