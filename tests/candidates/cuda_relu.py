"""A ReLU in the style models write for KernelBench: `#include <torch/extension.h>` inside the .cu, the
torch wrapper there too (TORCH_CHECK, empty_like, AT_DISPATCH_FLOATING_TYPES), a prototype in
cpp_sources. For tests/problems/big_relu.py; it builds with nvcc and needs a GPU to run."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] > scalar_t(0) ? x[i] : scalar_t(0);
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu_cuda", ([&] {
        relu_kernel<scalar_t><<<blocks, threads>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
    }));
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=True,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_cuda(x)
