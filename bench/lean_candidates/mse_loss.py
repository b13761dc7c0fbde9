# problem: level1/94_MSELoss.py
# A block reduction with atomicAdd into a zeros tensor, then tensor arithmetic in the wrapper.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void squared_diff_sum(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                 int64_t n) {
    extern __shared__ float cache[];
    float acc = 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        float d = a[i] - b[i];
        acc += d * d;
    }
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, cache[0]);
}

torch::Tensor mse_loss_cuda(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "shapes must match");
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    auto total = torch::zeros({1}, p.options());
    const int64_t n = p.numel();
    const int threads = 256;
    const int blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    squared_diff_sum<<<blocks, threads, threads * sizeof(float)>>>(p.data_ptr<float>(), t.data_ptr<float>(),
                                                                   total.data_ptr<float>(), n);
    return (total / static_cast<double>(n)).squeeze();
}
"""

cpp_source = "torch::Tensor mse_loss_cuda(torch::Tensor predictions, torch::Tensor targets);"

mse = load_inline(name="mse_loss", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["mse_loss_cuda"],
                  verbose=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return mse.mse_loss_cuda(predictions, targets)
