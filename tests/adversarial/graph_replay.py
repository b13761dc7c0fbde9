# CUDA graph replay (GPU): captures the LayerNorm on the first input, then only replays the graph on that stale copy.
# invariant: fresh_inputs
# problem: problems/layernorm_4d.py
# device: cuda
# expect: incorrect "differs from the reference" "while being timed" "in the memory of an earlier call's outputs"
import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.graph = None

    def forward(self, x):
        if self.graph is None:
            self.static_x = x.clone()
            side = torch.cuda.Stream(device=x.device)
            side.wait_stream(torch.cuda.current_stream(x.device))
            with torch.cuda.stream(side):
                layer_norm(self.static_x, self.weight, self.bias)  # warm-up before capture
            torch.cuda.current_stream(x.device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = layer_norm(self.static_x, self.weight, self.bias)
        self.graph.replay()
        return self.static_out
