import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last three dimensions of a 4D tensor."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]


def roofline_bytes() -> int:
    """x read once, y written once, weight and bias read once (float32)."""
    numel = batch_size * features * dim1 * dim2
    return 4 * (2 * numel + 2 * features * dim1 * dim2)


def roofline_flops() -> int:
    """8 per element: sum, centre/square/sum for the variance, centre/scale/weight/bias."""
    return 8 * batch_size * features * dim1 * dim2
