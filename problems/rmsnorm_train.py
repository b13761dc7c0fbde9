import torch
import torch.nn as nn

# A training kernel: the harness checks and times forward and backward as one call (see docs/backward.md).
BACKWARD = True
# The weight's gradient sums 16384 rows: a kernel that sums them in another order (blocks of rows,
# then the blocks) differs from PyTorch's reduction by up to a few 1e-5 in float32 where the sum is
# near zero, which the outputs' default atol of 1e-4 also covers; 1e-3 leaves room for float32
# reductions of other shapes without letting a wrong gradient through (a wrong term moves it by ~1).
GRAD_ATOL = 1e-3
GRAD_RTOL = 1e-4


class Model(nn.Module):
    """RMSNorm over the last dimension with a learnable weight, as LLMs train it (float32):
    y = x * rsqrt(mean(x^2, -1) + eps) * weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rstd * self.weight


tokens = 16384
hidden_size = 4096
eps = 1e-6


def get_inputs():
    return [torch.randn(tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, eps]


def roofline_bytes() -> int:
    """Forward and backward (float32): x read and y written; then the upstream gradient and x read and
    x's gradient written; the weight and its gradient, and a float a row, are small beside them."""
    return 4 * (5 * tokens * hidden_size + 3 * hidden_size + tokens)


def roofline_flops() -> int:
    """About 4 a element forward and 9 backward."""
    return 13 * tokens * hidden_size
