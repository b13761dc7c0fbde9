# problem: level1/23_Softmax.py
# A row per block, block reductions in shared memory, a template over the dtype, AT_DISPATCH, the current stream.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cfloat>

#define CHECK_CUDA(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)

template <typename scalar_t, int BLOCK>
__global__ void softmax_rows(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t cols) {
    __shared__ float shared[BLOCK];
    const scalar_t* row = x + blockIdx.x * cols;
    scalar_t* out = y + blockIdx.x * cols;

    float local_max = -FLT_MAX;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) local_max = fmaxf(local_max, (float)row[i]);
    shared[threadIdx.x] = local_max;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    const float row_max = shared[0];
    __syncthreads();

    float local_sum = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) local_sum += expf((float)row[i] - row_max);
    shared[threadIdx.x] = local_sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.f / shared[0];
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) out[i] = (scalar_t)(expf((float)row[i] - row_max) * inv);
}

torch::Tensor softmax_forward(torch::Tensor x) {
    CHECK_INPUT(x);
    TORCH_CHECK(x.dim() == 2, "expected a 2D tensor");
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    constexpr int BLOCK = 512;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "softmax_forward", ([&] {
        softmax_rows<scalar_t, BLOCK><<<rows, BLOCK, 0, stream>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), cols);
    }));
    return y;
}
"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(name="softmax_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                          functions=["softmax_forward"], extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return softmax_ext.softmax_forward(x.contiguous())
