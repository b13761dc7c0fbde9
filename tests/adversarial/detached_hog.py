# A process it double-forks into a session of its own and leaves spinning: it must neither run beside the reference nor outlive the evaluation.
# Out of reach: the reference is timed in a process of its own, this one's stopped meanwhile, so it is
# correct and no faster than the F.layer_norm it wraps (about 1x); beside the reference in its process it
# read several times that.
# invariant: reference_reach
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: correct under 1.5x
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        marker = os.environ.get("HARNESS_TEST_HOG_DIR")
        if marker:
            with open(os.path.join(marker, f"{os.getpid()}.pid"), "w") as f:
                f.write(str(os.getpid()))
        while True:
            pass
    os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
