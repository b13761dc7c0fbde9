# Lower precision on half its calls, at random: the fast verdict's one float64 trial misses it half the time.
# invariant: precision
# problem: tests/problems/matmul_mean.py
# device: cpu
# expect: incorrect "further from the reference computed in float64" | correct "lower precision"
import random

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)
        self.coin = random.Random()

    def forward(self, x):
        if self.coin.random() < 0.5:
            return torch.matmul(x, self.proj.weight.t()).mean(dim=-1)
        y = torch.matmul(x.to(torch.bfloat16), self.proj.weight.t().to(torch.bfloat16))
        return y.float().mean(dim=-1)
