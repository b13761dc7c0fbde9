# The kept input re-homed to a misaligned storage with the same values (Tensor.set_), so a reference timed on it takes a slower path.
# Out of reach: the reference is timed in a process of its own, this one's stopped meanwhile, so it is
# correct and no faster than the F.layer_norm it wraps (about 1x); beside the reference in its process it
# read several times that.
# A misaligned input slows a GPU's vectorized LayerNorm; on a small CPU problem it moves nothing.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# device: cuda
# expect: correct under 1.5x
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        if x.storage_offset() == 0 and x.is_contiguous():
            home = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
            home[1:].copy_(x.reshape(-1))
            with torch.no_grad():
                x.set_(home.untyped_storage(), 1, x.shape, x.stride())  # the same values, one element off
        return out
