"""BatchNorm as KernelBench runs it: in training mode the output uses the batch's statistics;
in eval mode the running statistics (here as constructed: mean 0, variance 1)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(8, 4, 6, 6) * 3 + 1]


def get_init_inputs():
    return [4]
