"""A reference that is slower under PyTorch's default float32 settings than under IEEE float32,
as cuDNN's GRU is on an H100 (50 ms with TF32 against 32 ms without): stands in for one on
machines without a GPU. Under the defaults it sleeps 2 ms and differs in the last bits (TF32
rounds); under IEEE it does neither."""
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if torch.backends.cudnn.conv.fp32_precision == "tf32":
            time.sleep(0.002)
            return x * 2.0 + 1e-7
        return x * 2.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
