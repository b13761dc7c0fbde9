# Altered trial inputs: overrides aten::normal_ for the CPU, so the inputs the worker draws from the reference process's seed differ
# from the reference process's; the harness must blame the candidate, not the problem.
# Its kernel for the random draw the harness makes inputs with is seen as it is registered.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "changed how inputs are drawn" "registered kernels of its own"
import torch
import torch.nn as nn

_lib = torch.library.Library("aten", "IMPL")
_lib.impl("normal_", lambda self, mean=0.0, std=1.0, generator=None: self.fill_(0.5), "CPU")


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return self.bias.expand_as(x).clone()
