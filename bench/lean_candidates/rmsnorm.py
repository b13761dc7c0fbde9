# problem: level1/36_RMSNorm_.py
# Normalized over dim 1 of (B, F, H, W): sizes read into a std::vector, strides by hand, an output of x's sizes.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <vector>

__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t features,
                                int64_t inner, int64_t positions, float eps) {
    int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (p >= positions) return;
    int64_t b = p / inner, s = p % inner;
    const float* base = x + b * features * inner + s;
    float sum_sq = 0.0f;
    for (int64_t f = 0; f < features; ++f) {
        float v = base[f * inner];
        sum_sq += v * v;
    }
    float inv = rsqrtf(sum_sq / features + eps);
    float* out = y + b * features * inner + s;
    for (int64_t f = 0; f < features; ++f) out[f * inner] = base[f * inner] * inv;
}

torch::Tensor rms_norm_cuda(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be CUDA");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    std::vector<int64_t> sizes = xc.sizes().vec();
    const int64_t batch = sizes[0], features = sizes[1];
    int64_t inner = 1;
    for (size_t d = 2; d < sizes.size(); ++d) inner *= sizes[d];
    auto y = torch::empty(sizes, xc.options());
    const int64_t positions = batch * inner;
    const int threads = 256;
    rms_norm_kernel<<<(positions + threads - 1) / threads, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                                                      features, inner, positions, (float)eps);
    return y;
}
"""

cpp_source = "torch::Tensor rms_norm_cuda(torch::Tensor x, double eps);"

rms = load_inline(name="rms_norm", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["rms_norm_cuda"],
                  verbose=True)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return rms.rms_norm_cuda(x, self.eps)
