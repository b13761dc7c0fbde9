import torch
import torch.nn as nn


class Model(nn.Module):
    """ConvTranspose3d, then LayerNorm over the last dimension, exact (erf) GELU and a scale.

    The (32, 32, 16, 32, 32) input becomes a (32, 64, 32, 64, 64) output; nn.LayerNorm(64)
    normalises its last dimension (W' = 64).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True,
                 eps=1e-5, scaling_factor=1.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size,
                                                 stride=stride, padding=padding, bias=bias)
        self.layer_norm = nn.LayerNorm(out_channels, eps=eps)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_transpose(x)
        x = self.layer_norm(x)
        x = torch.nn.functional.gelu(x)
        x = x * self.scaling_factor
        return x


batch_size = 32
in_channels = 32
out_channels = 64
D, H, W = 16, 32, 32
kernel_size = 4
stride = 2
padding = 1
bias = True
eps = 1e-5
scaling_factor = 1.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, D, H, W)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, bias, eps, scaling_factor]


def _out_size(n: int) -> int:
    return (n - 1) * stride - 2 * padding + kernel_size


def _taps(n: int) -> int:
    """(input position, kernel tap) pairs along one dimension that land inside the output."""
    out = _out_size(n)
    return sum(1 for i in range(n) for k in range(kernel_size) if 0 <= i * stride - padding + k < out)


def roofline_bytes() -> int:
    """Input read once, output written once, conv weight and bias, LayerNorm weight and bias."""
    x = batch_size * in_channels * D * H * W
    y = batch_size * out_channels * _out_size(D) * _out_size(H) * _out_size(W)
    params = in_channels * out_channels * kernel_size ** 3 + out_channels + 2 * _out_size(W)
    return 4 * (x + y + params)


def roofline_flops() -> int:
    """2 per multiply-add of the transposed convolution that lands in the output, plus
    10 per output element for bias, LayerNorm (8) and scale; GELU's erf is not counted."""
    macs = batch_size * in_channels * out_channels * _taps(D) * _taps(H) * _taps(W)
    y = batch_size * out_channels * _out_size(D) * _out_size(H) * _out_size(W)
    return 2 * macs + 10 * y
