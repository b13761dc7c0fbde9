# The kept input's class swapped for a __torch_function__ subclass that slows F.layer_norm: the reference timed on the same tensor would pay.
# Out of reach: the reference is timed in a process of its own, this one's stopped meanwhile, so it is
# correct and no faster than the F.layer_norm it wraps (about 1x); beside the reference in its process it
# read several times that.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: correct under 1.5x
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class _Slow(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is F.layer_norm:
            end = time.perf_counter() + 0.0004
            while time.perf_counter() < end:
                pass
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        plain = x.as_subclass(torch.Tensor)
        if type(x) is torch.Tensor:
            x.__class__ = _Slow  # the caller's tensor, kept for the next call
        return F.layer_norm(plain, self.weight.shape, self.weight, self.bias, 1e-5)
