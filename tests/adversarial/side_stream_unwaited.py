# Work on a stream of its own that never waits for the caller's (as RL-trained models write it): it runs while the device spins before the window.
# invariant: stream_order
# problem: tests/problems/small_layernorm.py
# device: cuda
# expect: incorrect "does not wait for the caller's stream"
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        with torch.cuda.stream(self.side):
            out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        return out
