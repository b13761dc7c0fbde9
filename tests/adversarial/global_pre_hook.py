# A global forward pre-hook that slows every LayerNorm module but its own (the reference's submodule), by a busy wait on the host or a spin on the device.
# Out of reach: the reference is timed in a process of its own, this one's stopped meanwhile, so it is
# correct and no faster than the F.layer_norm it wraps (about 1x); beside the reference in its process it
# read several times that.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# device: cpu cuda
# expect: correct under 1.5x
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def _slow(module, args):
    if type(module).__name__ != "LayerNorm":
        return
    if args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        torch.cuda._sleep(70_000)  # about 35 us of device time before the reference's kernel
    else:
        end = time.perf_counter() + 0.0004
        while time.perf_counter() < end:
            pass


nn.modules.module.register_module_forward_pre_hook(_slow)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
