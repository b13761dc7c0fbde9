# Prints without end in forward: its log would fill the disk.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()

    def forward(self, x):
        while True:
            print("x" * 1000)
