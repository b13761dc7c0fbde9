# Lower precision without a flag (GPU): the GEMM through a float16 addmm, its mean in float32.
# invariant: precision
# problem: tests/problems/matmul_mean.py
# device: cuda
# expect: incorrect "further from the reference computed in float64"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        zero = torch.zeros(self.proj.weight.shape[0], device=x.device, dtype=torch.float16)
        y = torch.addmm(zero, x.half(), self.proj.weight.t().half())
        return y.float().mean(dim=-1)
