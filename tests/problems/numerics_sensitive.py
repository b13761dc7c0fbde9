"""A reference whose speed and last bits depend on PyTorch's float32 settings, as a
cuDNN convolution's do under TF32 (stands in for one on machines without a GPU).

Under IEEE float32 it takes a slow exact path; under PyTorch's default settings
(`torch.backends.cudnn.conv.fp32_precision == "tf32"`) a quick one whose result
differs in the last bits."""
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if torch.backends.cudnn.conv.fp32_precision == "tf32":
            return x * 2.0 + 1e-7
        time.sleep(0.002)
        return x * 2.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
