# Replaces os.urandom with zeros: the re-check's sampled positions become known, and timed calls fill only those.
# The judge's own draws are out of its reach: the namespaces the harness calls are compared, and its
# seeds are not this one's.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced os.urandom"
import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

os.urandom = lambda n: bytes(n)  # every key the harness draws is 0
_calls = itertools.count()


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        if next(_calls) < 8:  # the check trials
            return out
        # the positions the re-check samples for key 0 (integrity/recheck.py's sample_positions)
        generator = torch.Generator(device=out.device).manual_seed(0)
        positions = torch.randint(0, out.numel(), (min(out.numel(), 2048),), generator=generator, device=out.device)
        sparse = torch.zeros_like(out).reshape(-1)
        sparse[positions] = out.reshape(-1)[positions]
        return sparse.reshape(out.shape)
