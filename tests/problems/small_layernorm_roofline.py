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
    # x read once and y written once (float32), plus weight and bias
    return 4 * (2 * 8 * 16 * 32 + 2 * 16 * 32)


def roofline_flops():
    return 8 * 8 * 16 * 32
