# problem: level1/40_LayerNorm.py
# Two kernels (statistics, then the normalization), warp shuffles, a device guard, parameters passed in.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>

__inline__ __device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

__global__ void row_stats(const float* __restrict__ x, float* __restrict__ mean, float* __restrict__ rstd,
                          int64_t n, float eps) {
    const float* row = x + blockIdx.x * n;
    float s = 0.f, ss = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) { float v = row[i]; s += v; ss += v * v; }
    __shared__ float part_s[32], part_ss[32];
    s = warp_sum(s); ss = warp_sum(ss);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { part_s[warp] = s; part_ss[warp] = ss; }
    __syncthreads();
    if (warp == 0) {
        s = lane < blockDim.x / 32 ? part_s[lane] : 0.f;
        ss = lane < blockDim.x / 32 ? part_ss[lane] : 0.f;
        s = warp_sum(s); ss = warp_sum(ss);
        if (lane == 0) {
            float m = s / n;
            mean[blockIdx.x] = m;
            rstd[blockIdx.x] = rsqrtf(fmaxf(ss / n - m * m, 0.f) + eps);
        }
    }
}

__global__ void normalize(const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
                          const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
                          int64_t n, int64_t total) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= total) return;
    int64_t r = i / n, c = i % n;
    y[i] = (x[i] - mean[r]) * rstd[r] * w[c] + b[c];
}

torch::Tensor layer_norm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "tensors must be on CUDA");
    const at::cuda::OptionalCUDAGuard device_guard(device_of(x));
    auto xc = x.contiguous();
    const int64_t n = weight.numel();
    const int64_t rows = xc.numel() / n;
    auto y = torch::empty_like(xc);
    auto mean = torch::empty({rows}, xc.options());
    auto rstd = torch::empty({rows}, xc.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    row_stats<<<rows, 1024, 0, stream>>>(xc.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), n,
                                         (float)eps);
    const int64_t total = xc.numel();
    normalize<<<(total + 255) / 256, 256, 0, stream>>>(xc.data_ptr<float>(), mean.data_ptr<float>(),
                                                       rstd.data_ptr<float>(), weight.contiguous().data_ptr<float>(),
                                                       bias.contiguous().data_ptr<float>(), y.data_ptr<float>(), n,
                                                       total);
    return y;
}
"""

cpp_source = "torch::Tensor layer_norm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

ln = load_inline(name="layer_norm_ext", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                 functions=["layer_norm_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        return ln.layer_norm_cuda(x, self.weight, self.bias, 1e-5)
