# Side-stream work timed to run during the spin before the window: the host waits for the last call's work, launches on a stream that does not wait for the caller's, then joins.
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
        self.side, self.done = None, None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        if self.done is not None:
            self.done.synchronize()  # the device is free: this call's work starts at once, inside the caller's spin
        with torch.cuda.stream(self.side):
            out = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
            self.done = torch.cuda.Event()
            self.done.record()
        torch.cuda.current_stream(x.device).wait_stream(self.side)  # joined: ready on the caller's stream
        return out
