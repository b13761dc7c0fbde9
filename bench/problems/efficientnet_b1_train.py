"""torchvision's EfficientNet-B1 in training mode (BatchNorm on batch statistics), batch 10 at
240x240, as KernelBench level 3 problem 23 sizes it: a copy of it read 0.97x in one evaluation."""
import torch
import torch.nn as nn
import torchvision

batch_size = 10


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torchvision.models.efficientnet_b1(num_classes=1000)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, 3, 240, 240)]


def get_init_inputs():
    return []
