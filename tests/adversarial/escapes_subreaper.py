# Turns off its process's adoption of orphans (PR_SET_CHILD_SUBREAPER), then double-forks a spinning process out of the tree the harness stops and ends.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "turned off its process's adoption of the processes it starts"
import ctypes
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off
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
