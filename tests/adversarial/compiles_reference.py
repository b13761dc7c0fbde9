# torch.compile of the reference: wraps nn.LayerNorm in torch.compile instead of writing a kernel.
# Read from the source: the strict policy refuses it unrun.
# invariant: static_policy
# problem: tests/problems/small_layernorm.py
# device: cpu cuda
# expect[strict]: rejected "hands the work to a compiler"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = torch.compile(nn.LayerNorm(normalized_shape))

    def forward(self, x):
        return self.ln(x)
