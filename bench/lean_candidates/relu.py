# problem: level1/19_ReLU.py
# The plainest style: torch/extension.h in the .cu, one kernel, empty_like, verbose=True.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* input, float* output, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        output[idx] = fmaxf(input[idx], 0.0f);
    }
}

torch::Tensor relu_cuda(torch::Tensor input) {
    auto output = torch::empty_like(input);
    int size = input.numel();
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    relu_kernel<<<num_blocks, block_size>>>(input.data_ptr<float>(), output.data_ptr<float>(), size);
    return output;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor input);"

relu = load_inline(name="relu", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu_cuda"],
                   verbose=True, extra_cflags=[""], extra_ldflags=[""])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu

    def forward(self, x):
        return self.relu.relu_cuda(x)
