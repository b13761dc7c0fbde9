# Background worker thread started at import: forward only queues the work, so no new thread appears per call.
# Caught as a running thread, or by its unfinished output when the thread is between jobs.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "background thread" | incorrect "differs from the reference"
import queue
import threading
import time

import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


_jobs: queue.Queue = queue.Queue()


def _serve():
    while True:
        out, x, weight, bias = _jobs.get()
        time.sleep(0.005)
        with torch.no_grad():
            out.copy_(layer_norm(x, weight, bias))


threading.Thread(target=_serve, daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        out = torch.zeros_like(x)
        _jobs.put((out, x, self.weight, self.bias))
        return out
