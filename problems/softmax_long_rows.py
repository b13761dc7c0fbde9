import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of long rows (4096 rows of 32768 float32)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 4096
dim = 32768


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def roofline_bytes() -> int:
    """x read once (512 MiB) and y written once (512 MiB)."""
    return 4 * 2 * batch_size * dim


def roofline_flops() -> int:
    """5 per element: max, subtract, exp, sum, scale."""
    return 5 * batch_size * dim
