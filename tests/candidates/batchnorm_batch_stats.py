"""BatchNorm from the batch's statistics: what training mode computes."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        mean = x.mean(dim=(0, 2, 3), keepdim=True)
        var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
        scale = self.weight.view(1, -1, 1, 1) / torch.sqrt(var + 1e-5)
        return (x - mean) * scale + self.bias.view(1, -1, 1, 1)
