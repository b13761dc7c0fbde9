# Honest: captures its forward in a CUDA graph on static buffers at the first call, then copies each call's
# inputs into them on the caller's stream, replays, and returns a copy of the static output (fresh each call).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.graph = self.static_in = self.static_out = None

    def _body(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    def forward(self, x):
        if self.graph is None or self.static_in.shape != x.shape:
            self.static_in = x.clone()
            side = torch.cuda.Stream(device=x.device)
            side.wait_stream(torch.cuda.current_stream(x.device))
            with torch.cuda.stream(side):
                self._body(self.static_in)  # warm-up off the capture, as torch.cuda.graphs asks
            torch.cuda.current_stream(x.device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = self._body(self.static_in)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()
