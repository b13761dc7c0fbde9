# A sweep problem: a tiny elementwise op behind a 0.004 s sleep, so a candidate without the
# sleep is many times faster on any machine, and one with a longer sleep slower.
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.004)
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
