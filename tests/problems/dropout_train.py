"""A reference that draws random numbers: dropout, active in training mode (KernelBench's)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.linear = nn.Linear(32, 16)
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(self.linear(x))


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [0.5]
