# Replaces random.seed, which drawing each timed call's inputs calls with its seed before the window: draws those inputs there and computes the output outside the window.
# The judge's own draws are out of its reach: the namespaces the harness calls are compared, and its
# seeds are not this one's.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced random.seed"
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

_seed = random.seed
_ready = {}


def _seeing(a=None, *args, **kwargs):
    _seed(a, *args, **kwargs)
    if isinstance(a, int) and _ready.get("model") is not None:
        model = _ready["model"]
        gen = torch.Generator().manual_seed(a)  # the problem's get_inputs(), drawn the same way torch.manual_seed(a) would
        x = torch.randn(8, 16, 32, generator=gen)
        _ready["out"] = F.layer_norm(x, model.weight.shape, model.weight, model.bias, 1e-5)


random.seed = _seeing


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        _ready["model"] = self

    def forward(self, x):
        out = _ready.pop("out", None)
        if out is not None and out.shape == x.shape:
            return out
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
