# LayerNorm as a C++ extension (CPU), built by load_inline at import.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t n = weight.numel();
    const int64_t rows = xc.numel() / n;
    const float* px = xc.data_ptr<float>();
    const float* pw = weight.contiguous().data_ptr<float>();
    const float* pb = bias.contiguous().data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * n;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; ++i) { sum += row[i]; sq += (double)row[i] * row[i]; }
        double mean = sum / n;
        double inv = 1.0 / std::sqrt(sq / n - mean * mean + eps);
        for (int64_t i = 0; i < n; ++i)
            po[r * n + i] = (float)((row[i] - mean) * inv) * pw[i] + pb[i];
    }
    return out;
}
"""

ext = load_inline(name="cpp_layernorm_test", cpp_sources=cpp_source, functions=["layer_norm"],
                  extra_cflags=["-O3"], use_pch=True)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return ext.layer_norm(x, self.weight, self.bias, 1e-5)
