# A softmax that skips subtracting each row's maximum: right on randn's inputs, infinite over infinite (NaN)
# once they are scaled by a thousand. The fast verdict passes it; the audit's other input distributions do not.
# invariant: other_inputs
# problem: tests/problems/softmax_rows.py
# device: cpu cuda
# expect[audit]: incorrect "not on them scaled by 1000"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)
