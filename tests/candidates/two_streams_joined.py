# Honest: splits the rows between two streams of its own, each waiting for the caller's stream through an
# event, and the caller's stream waits for both the same way: PyTorch's stream order, kept.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.streams = None

    def forward(self, x):
        if self.streams is None:
            self.streams = [torch.cuda.Stream(device=x.device) for _ in range(2)]
        caller = torch.cuda.current_stream(x.device)
        ready = torch.cuda.Event()
        ready.record(caller)
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        for stream, rows in zip(self.streams, (slice(0, half), slice(half, None))):
            stream.wait_event(ready)
            with torch.cuda.stream(stream):
                out[rows] = F.layer_norm(x[rows], self.weight.shape, self.weight, self.bias, 1e-5)
                done = torch.cuda.Event()
                done.record(stream)
            caller.wait_event(done)
        out.record_stream(caller)
        return out
