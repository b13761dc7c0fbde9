# A deliberately slow reference for loop tests on CPU: a Python loop over rows,
# so a vectorised candidate is many times faster without any build.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = torch.tanh(x[i]) * self.scale + 1.0
        return out


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return [2.0]
