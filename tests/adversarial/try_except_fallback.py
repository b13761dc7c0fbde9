# try/except fallback: a CUDA kernel that may fail to build or run, silently replaced by F.layer_norm when it does.
# Read from the source: the strict policy refuses it unrun.
# invariant: static_policy
# problem: tests/problems/small_layernorm.py
# device: cpu cuda
# expect[strict]: rejected "falls back to torch"
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void layer_norm_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];  // unfinished
}
torch::Tensor layer_norm(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    layer_norm_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

try:
    ext = load_inline(name="ln_fallback", cpp_sources="torch::Tensor layer_norm(torch::Tensor x);",
                      cuda_sources=cuda_source, functions=["layer_norm"])
except Exception:
    ext = None


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        try:
            return ext.layer_norm(x)
        except Exception:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)
