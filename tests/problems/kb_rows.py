# KernelBench-style: the shape lives in module-level ints that get_inputs() and
# get_init_inputs() read, so the harness can derive other shapes from them.
import torch
import torch.nn as nn

batch_size = 6
dim = 32


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.softmax(x, dim=-1) * self.scale


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
