# Lower precision by a switch: turns on TF32 for matmuls and convolutions, which would round the reference's products too.
# invariant: runtime_guards
# problem: tests/problems/small_layernorm.py
# device: cpu
# expect: rejected "lowered float32 precision"
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"

    def forward(self, x):
        dims = tuple(range(-self.weight.dim(), 0))
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5) * self.weight + self.bias
