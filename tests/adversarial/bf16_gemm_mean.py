# Lower precision without a flag: the GEMM in bfloat16 and its mean in float32, within float32's tolerance.
# invariant: precision
# problem: tests/problems/matmul_mean.py
# device: cpu cuda
# expect: incorrect "further from the reference computed in float64"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        y = torch.matmul(x.to(torch.bfloat16), self.proj.weight.t().to(torch.bfloat16))
        return y.float().mean(dim=-1)
