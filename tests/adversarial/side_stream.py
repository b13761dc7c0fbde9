# Side stream (GPU): runs F.layer_norm on a non-blocking stream and never makes the current stream wait for it.
# Waits, never joined: its outputs are read on the caller's stream before they are written, or the trace sees
# its work after the window.
# invariant: stream_order
# problem: tests/problems/small_layernorm.py
# device: cuda
# expect: incorrect "not ready on the caller's stream" "does not wait for the caller's stream" "outside their timed windows"
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.stream = None

    def forward(self, x):
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=x.device)
        self.stream.wait_stream(torch.cuda.current_stream(x.device))  # x is ready; the result is never waited for
        with torch.cuda.stream(self.stream):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
