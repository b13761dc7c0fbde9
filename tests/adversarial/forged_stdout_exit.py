# Forged verdict on stdout and an early exit: prints a passing JSON result and leaves with os._exit(0) before any check.
# invariant: forged_channel
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: crashed "exited with status 0"
import json
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        print(json.dumps({"verdict": "correct", "speedup": 1000.0, "check": {"passed": True}}), flush=True)
        os._exit(0)
