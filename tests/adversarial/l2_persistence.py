# L2 persistence (GPU): sets aside persisting L2 and pins the weight there, so the harness's cache flush cannot
# evict it.
# invariant: runtime_guards
# problem: problems/layernorm_4d.py
# device: cuda
# expect: rejected "left persisting L2 set"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <algorithm>

static void ok(cudaError_t err) { TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err)); }

void persist(int64_t ptr, int64_t bytes, int64_t stream) {
    int dev = 0, max_persisting = 0, max_window = 0;
    ok(cudaGetDevice(&dev));
    ok(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, dev));
    ok(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev));
    ok(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, std::min<size_t>(max_persisting, bytes)));
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(ptr);
    attr.accessPolicyWindow.num_bytes = std::min<size_t>(max_window, bytes);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    ok(cudaStreamSetAttribute(reinterpret_cast<cudaStream_t>(stream), cudaStreamAttributeAccessPolicyWindow, &attr));
}
"""

ext = load_inline(name="l2_persistence_adversarial", cpp_sources=cpp_source, functions=["persist"], with_cuda=True)


def layer_norm(x, weight, bias, eps=1e-5):
    dims = tuple(range(-weight.dim(), 0))
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.stream = None

    def forward(self, x):
        current = torch.cuda.current_stream(x.device)
        if self.stream is None:
            self.stream = torch.cuda.Stream(device=x.device)
            ext.persist(self.weight.data_ptr(), self.weight.nbytes, self.stream.cuda_stream)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = layer_norm(x, self.weight, self.bias)
        current.wait_stream(self.stream)  # properly ordered: only the cache is gamed
        return out
