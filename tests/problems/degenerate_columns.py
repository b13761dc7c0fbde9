# Degenerate along one dimension on purpose: each row's log-sum-exp is repeated across the row's columns,
# so every column is the same, though the output changes with the input. The load must flag it as
# constant along dim 1 (a candidate that computes one column and repeats it passes the check).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, dim=1, keepdim=True).repeat(1, x.shape[1])


def get_inputs():
    return [torch.randn(64, 16)]


def get_init_inputs():
    return []
