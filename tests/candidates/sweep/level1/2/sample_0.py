# Correct and slow: three times the reference's sleep.
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.012)
        return x + 1
