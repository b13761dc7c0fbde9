# Background thread: returns an empty tensor at once and starts a thread that fills it after the timer stopped.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "background thread"
import threading
import time

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

    def forward(self, x):
        out = torch.zeros_like(x)

        def fill():
            time.sleep(0.05)
            with torch.no_grad():
                out.copy_(layer_norm(x, self.weight, self.bias))

        threading.Thread(target=fill, daemon=True).start()
        return out
