# problem: level1/25_Swish.py
# Two kernels on a stream of the caller's, c10's stream helpers, a templated block size, half supported.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_fp16.h>

template <typename scalar_t, int BLOCK>
__global__ void __launch_bounds__(BLOCK) sigmoid_kernel(const scalar_t* __restrict__ x, float* __restrict__ s,
                                                        int64_t n) {
    int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
    if (i < n) s[i] = 1.0f / (1.0f + __expf(-static_cast<float>(x[i])));
}

template <typename scalar_t, int BLOCK>
__global__ void __launch_bounds__(BLOCK) multiply_kernel(const scalar_t* __restrict__ x, const float* __restrict__ s,
                                                         scalar_t* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)BLOCK + threadIdx.x;
    if (i < n) y[i] = static_cast<scalar_t>(static_cast<float>(x[i]) * s[i]);
}

torch::Tensor swish(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    auto sig = torch::empty(input.sizes(), input.options().dtype(torch::kFloat32));
    const int64_t n = input.numel();
    constexpr int BLOCK = 256;
    const unsigned blocks = (unsigned)((n + BLOCK - 1) / BLOCK);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(input.scalar_type(), "swish", [&] {
        sigmoid_kernel<scalar_t, BLOCK><<<blocks, BLOCK, 0, stream>>>(input.data_ptr<scalar_t>(),
                                                                     sig.data_ptr<float>(), n);
        multiply_kernel<scalar_t, BLOCK><<<blocks, BLOCK, 0, stream>>>(input.data_ptr<scalar_t>(),
                                                                      sig.data_ptr<float>(),
                                                                      out.data_ptr<scalar_t>(), n);
    });
    return out;
}
"""

cpp_source = "torch::Tensor swish(torch::Tensor x);"

swish_ext = load_inline(name="swish_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["swish"],
                        with_cuda=True, extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return swish_ext.swish(x)
