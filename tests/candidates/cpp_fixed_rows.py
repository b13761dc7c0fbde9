# Softmax times a scale, as a C++ extension that hard-codes the row length of
# tests/problems/kb_rows.py's main shape (32): right there, wrong at any other.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor scaled_softmax(torch::Tensor x, torch::Tensor scale) {
    const int64_t n = 32;  // the row length, hard-coded
    auto xc = x.contiguous();
    auto out = torch::zeros_like(xc);
    const int64_t rows = xc.numel() / n;
    const float* px = xc.data_ptr<float>();
    const float* ps = scale.contiguous().data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float m = px[r * n];
        for (int64_t i = 1; i < n; ++i) m = std::max(m, px[r * n + i]);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(px[r * n + i] - m);
        for (int64_t i = 0; i < n; ++i) po[r * n + i] = (float)(std::exp(px[r * n + i] - m) / sum) * ps[i % scale.numel()];
    }
    return out;
}
"""

ext = load_inline(name="cpp_fixed_rows_test", cpp_sources=cpp_source, functions=["scaled_softmax"],
                  extra_cflags=["-O3"], use_pch=True)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return ext.scaled_softmax(x, self.scale)
