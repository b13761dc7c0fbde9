# Constant output on a degenerate problem: softmax over a dimension of size 1 is 1.0 everywhere; it returns ones.
# A constant is this problem's right answer, so it is correct; the problem lint must flag the problem.
# invariant: problem_lint
# problem: tests/problems/degenerate_softmax.py
# device: cpu
# expect: correct "the same value everywhere"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
