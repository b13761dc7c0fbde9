# Correct LayerNorm that reads a value back to the host inside forward: fine eagerly,
# but a CUDA graph cannot capture the synchronization that needs.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        eps = 1e-5 if float(x.abs().max()) >= 0 else 1e-5  # a device-to-host copy
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, eps)
