# Monkeypatched harness.compare.compare (through sys.modules): always passes, hoping outputs are compared in-process.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "replaced harness.compare.compare"
import sys

import torch
import torch.nn as nn

_compare = sys.modules.get("harness.engine.checking.compare")
if _compare is not None:
    _results = sys.modules["harness.results"]
    _compare.compare = lambda *args, **kwargs: _results.CheckResult(True)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return torch.empty_like(x)
