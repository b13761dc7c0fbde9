# problem: level1/47_Sum_reduction_over_a_dimension.py
# The bindings written in the .cu (PYBIND11_MODULE), cpp_sources empty, no functions=: a style models use.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

template <typename scalar_t>
__global__ void sum_dim_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t outer,
                               int64_t reduce, int64_t inner) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= outer * inner) return;
    int64_t o = i / inner, in = i % inner;
    const scalar_t* p = x + o * reduce * inner + in;
    scalar_t acc = 0;
    for (int64_t r = 0; r < reduce; ++r) acc += p[r * inner];
    y[i] = acc;
}

torch::Tensor sum_dim(torch::Tensor x, int64_t dim) {
    auto xc = x.contiguous();
    auto sizes = xc.sizes().vec();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
    for (int64_t d = dim + 1; d < (int64_t)sizes.size(); ++d) inner *= sizes[d];
    const int64_t reduce = sizes[dim];
    sizes[dim] = 1;
    auto y = torch::empty(sizes, xc.options());
    const int threads = 256;
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "sum_dim", [&] {
        sum_dim_kernel<scalar_t><<<(outer * inner + threads - 1) / threads, threads>>>(
            xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), outer, reduce, inner);
    });
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("sum_dim", &sum_dim, "sum over a dimension, keepdim");
}
"""

cpp_source = ""

sum_ext = load_inline(name="sum_dim_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return sum_ext.sum_dim(x, self.dim)
