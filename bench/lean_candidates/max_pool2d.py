# problem: level1/42_Max_Pooling_2D.py
# Four sizes read from the input, the output made with torch::empty, a grid-stride loop, the error check by hand.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cfloat>

__global__ void max_pool2d_kernel(const float* __restrict__ input, float* __restrict__ output, int N, int C, int H,
                                  int W, int OH, int OW, int k, int stride, int pad, int dilation) {
    const int total = N * C * OH * OW;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += blockDim.x * gridDim.x) {
        int ow = idx % OW, oh = (idx / OW) % OH, c = (idx / (OW * OH)) % C, n = idx / (OW * OH * C);
        const float* plane = input + ((int64_t)n * C + c) * H * W;
        float best = -FLT_MAX;
        for (int i = 0; i < k; ++i) {
            int h = oh * stride - pad + i * dilation;
            if (h < 0 || h >= H) continue;
            for (int j = 0; j < k; ++j) {
                int w = ow * stride - pad + j * dilation;
                if (w < 0 || w >= W) continue;
                best = fmaxf(best, plane[h * W + w]);
            }
        }
        output[idx] = best;
    }
}

torch::Tensor max_pool2d_cuda(torch::Tensor input, int kernel_size, int stride, int padding, int dilation) {
    TORCH_CHECK(input.dim() == 4, "expected NCHW input");
    auto x = input.contiguous();
    const int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int OH = (H + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    const int OW = (W + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    auto output = torch::empty({N, C, OH, OW}, x.options());
    const int threads = 256;
    const int blocks = std::min((N * C * OH * OW + threads - 1) / threads, 65535);
    max_pool2d_kernel<<<blocks, threads>>>(x.data_ptr<float>(), output.data_ptr<float>(), N, C, H, W, OH, OW,
                                           kernel_size, stride, padding, dilation);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        printf("CUDA error in max_pool2d_kernel: %s\n", cudaGetErrorString(err));
    }
    return output;
}
"""

cpp_source = "torch::Tensor max_pool2d_cuda(torch::Tensor input, int kernel_size, int stride, int padding, int dilation);"

pool = load_inline(name="max_pool2d", cpp_sources=cpp_source, cuda_sources=cuda_source,
                   functions=["max_pool2d_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.args = (kernel_size, stride, padding, dilation)

    def forward(self, x):
        return pool.max_pool2d_cuda(x, *self.args)
