# Degenerate on purpose, a slip seen in public problem sets: the softmax runs over a dimension of
# size 1, so the output is 1.0 everywhere whatever the input. The problem lint must flag it.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.sum(x, dim=1, keepdim=True)
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32, 16]
