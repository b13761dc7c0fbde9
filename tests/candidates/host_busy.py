# Honest and host-bound: one stream, two kernels, and 0.3 ms of host work between them (a busy-wait,
# as a Python-side scheduler or an autograd Function's bookkeeping would spend). Nothing runs off the
# caller's stream, so nothing is hidden: its latency is above its GPU time, a fact the panel states.
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        dims = tuple(range(-self.weight.dim(), 0))
        mean = x.mean(dim=dims, keepdim=True)
        until = time.perf_counter() + 0.0003
        while time.perf_counter() < until:
            pass
        var = (x - mean).pow(2).mean(dim=dims, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * self.weight + self.bias
