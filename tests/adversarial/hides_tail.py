# A 0.2 ms tail left on a side stream nobody waits for: its outputs are right and ready, the work lies outside the window.
# invariant: hidden_work
# problem: tests/problems/small_layernorm.py
# device: cuda
# expect: incorrect "outside their timed windows"
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
        out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        self.side.wait_stream(torch.cuda.current_stream(x.device))
        with torch.cuda.stream(self.side):
            torch.cuda._sleep(400_000)  # about 0.2 ms of device time the caller's stream never waits for
        return out
