import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm over the last dimension with a learnable weight:
    y = x * rsqrt(mean(x^2, -1) + eps) * weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rstd * self.weight


batch_size = 16
seq_len = 2048
hidden_size = 4096
eps = 1e-6


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]


def roofline_bytes() -> int:
    """x read once (512 MiB), y written once, weight read once (float32)."""
    return 4 * (2 * batch_size * seq_len * hidden_size + hidden_size)


def roofline_flops() -> int:
    """4 per element: square, sum, scale by rstd, scale by weight."""
    return 4 * batch_size * seq_len * hidden_size
