# problem: level1/26_GELU_.py
# float4 loads for float, half through AT_DISPATCH_FLOATING_TYPES_AND_HALF, cuda_fp16, the launch check.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

template <typename T>
__device__ __forceinline__ T gelu_exact(T v) {
    float x = static_cast<float>(v);
    return static_cast<T>(0.5f * x * (1.0f + erff(x * 0.70710678118654752f)));
}

__global__ void gelu_float4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];
        v.x = gelu_exact(v.x); v.y = gelu_exact(v.y); v.z = gelu_exact(v.z); v.w = gelu_exact(v.w);
        y[i] = v;
    }
}

template <typename scalar_t>
__global__ void gelu_scalar(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t start, int64_t n) {
    int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu_exact<scalar_t>(x[i]);
}

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const int64_t n = input.numel();
    const int threads = 256;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (input.scalar_type() == at::ScalarType::Float && n % 4 == 0) {
        const int64_t n4 = n / 4;
        gelu_float4<<<(n4 + threads - 1) / threads, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(input.data_ptr<float>()), reinterpret_cast<float4*>(output.data_ptr<float>()), n4);
    } else {
        AT_DISPATCH_FLOATING_TYPES_AND_HALF(input.scalar_type(), "gelu_scalar", [&] {
            gelu_scalar<scalar_t><<<(n + threads - 1) / threads, threads, 0, stream>>>(
                input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(), 0, n);
        });
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return output;
}
"""

cpp_source = "torch::Tensor gelu_forward(torch::Tensor x);"

gelu_ext = load_inline(name="gelu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["gelu_forward"],
                       extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_ext.gelu_forward(x)
