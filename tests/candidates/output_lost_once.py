# Correct LayerNorm whose first trial's outputs are changed on their way to the reference process, after its
# process summed them: a transfer lost once, as a fault of the harness's own would lose it. The harness must
# run that trial again, not call the candidate incorrect.
import sys

import torch
import torch.nn as nn

_HANDING_OVER = {"_tensor_fd", "export"}  # harness/engine/processes/channel.py, gpu_ipc.py
_armed = [True]


def _loses_it(frame, event, arg):
    if event == "call" and frame.f_code.co_name in _HANDING_OVER and "processes" in frame.f_code.co_filename:
        frame.f_locals["tensor"].zero_()
        sys.setprofile(None)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.dims = tuple(range(-len(normalized_shape), 0))
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        mean = x.mean(dim=self.dims, keepdim=True)
        var = x.var(dim=self.dims, keepdim=True, unbiased=False)
        if _armed[0]:
            _armed[0] = False
            sys.setprofile(_loses_it)
        return (x - mean) * torch.rsqrt(var + 1e-5) * self.weight + self.bias
