import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b) with nn.Linear(8192, 8192) on an (8192, 8192) float32 input."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 8192
in_features = 8192
out_features = 8192


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def roofline_bytes() -> int:
    """x, W and b read once, y written once (float32)."""
    return 4 * (batch_size * in_features + out_features * in_features + out_features
                + batch_size * out_features)


def roofline_flops() -> int:
    """2 per multiply-add of the product, plus bias and ReLU per output element."""
    return 2 * batch_size * in_features * out_features + 2 * batch_size * out_features
