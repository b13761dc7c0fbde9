# Forged reply on the private channel: finds the worker's socket through sys.argv and, when first timed, sends
# made-up timings and exits.
# invariant: forged_channel
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "forged"
# expect[strict]: rejected "reaches into the harness"
import os
import socket
import sys
import time

import torch
import torch.nn as nn


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def being_timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").endswith("timing.clock"):
            return True
        frame = frame.f_back
    return False


def timing(median_ms: float) -> dict:
    return {"median": median_ms, "iqr": 0.0, "mean": median_ms, "min": median_ms, "n": 100,
            "rel_se": 0.001, "method": "perf_counter"}


def forge(reference_ms: float) -> None:
    from harness.engine.processes import channel

    conn = channel.Channel(socket.socket(fileno=os.dup(int(sys.argv[2]))))
    channel.send(conn, {"timings": {"candidate": timing(reference_ms / 1000), "reference": timing(reference_ms)},
                        "tampered": []})
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        if being_timed():
            start = time.perf_counter()
            layer_norm(x, self.weight, self.bias)
            forge((time.perf_counter() - start) * 1e3)
        return layer_norm(x, self.weight, self.bias)
