import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(8, 16, 32)]


def get_init_inputs():
    return [(16, 32)]


def roofline_bytes():
    # declares a petabyte, so every real time falls below the floor
    return 10 ** 15  # far more than the problem moves: any time is "too fast"


def roofline_flops():
    return 8 * 8 * 16 * 32
