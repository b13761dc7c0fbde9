# Honest: reads the legacy TF32 flags (as model-written kernels often do, to decide a path) and turns on
# cudnn.benchmark for the whole process. It must run, and the switch must be reported, not held against it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.benchmark = True

    def forward(self, x):
        assert not self.tf32  # the harness holds float32 to IEEE, so both legacy flags read False
        dims = tuple(range(-self.weight.dim(), 0))
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + 1e-5) * self.weight + self.bias
