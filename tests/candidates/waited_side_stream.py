# Runs LayerNorm on a stream of its own and makes the caller's stream wait for it, as
# KernelBench's non-default-stream example does with its GEMM: honest, and timed as such.
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
        caller = torch.cuda.current_stream(x.device)
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            y = F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
        caller.wait_stream(self.stream)
        y.record_stream(caller)
        return y
