"""Softsign in one C++ loop (tests/problems/softsign_three_ops.py): one pass where the reference makes three."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
torch::Tensor softsign(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    float* b = y.data_ptr<float>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) b[i] = a[i] / (1.0f + (a[i] < 0 ? -a[i] : a[i]));
    return y;
}
"""
ext = load_inline(name="softsign_fused", cpp_sources=cpp, functions=["softsign"], extra_cflags=["-O3"], use_pch=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.softsign(x.contiguous())
