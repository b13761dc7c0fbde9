# LayerNorm over the last three dims, written for rows of millions of elements:
# each row is split into chunks so every SM has work. Pass 1 sums each chunk
# (shifted by the row's first element, to keep the variance exact), pass 2
# combines a row's partial sums in double and normalises its chunk with
# float4 loads. Built with the quick idiom: raw CUDA, torch wrapper apart.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int THREADS = 256;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}

__device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < THREADS / 32 ? shared[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    __syncthreads();
    return v;
}

__global__ void chunk_stats(const float4* __restrict__ x, const float* __restrict__ xs,
                            float2* __restrict__ partial, int64_t row_vec, int64_t chunk_vec,
                            int chunks) {
    __shared__ float s1[THREADS / 32], s2[THREADS / 32];
    const int64_t row = blockIdx.y, chunk = blockIdx.x;
    const float shift = xs[row * row_vec * 4];
    const float4* p = x + row * row_vec + chunk * chunk_vec;
    float a = 0.f, q = 0.f;
    for (int64_t i = threadIdx.x; i < chunk_vec; i += THREADS) {
        const float4 v = p[i];
        const float d0 = v.x - shift, d1 = v.y - shift, d2 = v.z - shift, d3 = v.w - shift;
        a += (d0 + d1) + (d2 + d3);
        q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
    }
    a = block_sum(a, s1);
    q = block_sum(q, s2);
    if (threadIdx.x == 0) partial[row * chunks + chunk] = make_float2(a, q);
}

__global__ void normalize(const float4* __restrict__ x, const float* __restrict__ xs,
                          const float2* __restrict__ partial, const float4* __restrict__ w,
                          const float4* __restrict__ b, float4* __restrict__ y, int64_t row_vec,
                          int64_t chunk_vec, int chunks, double inv_n, float eps) {
    __shared__ float mean_s, rstd_s;
    const int64_t row = blockIdx.y, chunk = blockIdx.x;
    if (threadIdx.x < 32) {
        double a = 0.0, q = 0.0;
        for (int i = threadIdx.x; i < chunks; i += 32) {
            const float2 v = partial[row * chunks + i];
            a += v.x;
            q += v.y;
        }
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_down_sync(0xffffffff, a, o);
            q += __shfl_down_sync(0xffffffff, q, o);
        }
        if (threadIdx.x == 0) {
            const double m = a * inv_n;
            const double var = fmax(q * inv_n - m * m, 0.0);
            mean_s = (float)(m + (double)xs[row * row_vec * 4]);
            rstd_s = (float)(1.0 / sqrt(var + (double)eps));
        }
    }
    __syncthreads();
    const float mean = mean_s, rstd = rstd_s;
    const int64_t base = chunk * chunk_vec;
    const float4* px = x + row * row_vec + base;
    float4* py = y + row * row_vec + base;
    for (int64_t i = threadIdx.x; i < chunk_vec; i += THREADS) {
        const float4 v = px[i], g = w[base + i], c = b[base + i];
        float4 r;
        r.x = (v.x - mean) * rstd * g.x + c.x;
        r.y = (v.y - mean) * rstd * g.y + c.y;
        r.z = (v.z - mean) * rstd * g.z + c.z;
        r.w = (v.w - mean) * rstd * g.w + c.w;
        py[i] = r;
    }
}

void layer_norm_launch(const float* x, const float* w, const float* b, float* y, float* partial,
                       int64_t rows, int64_t row_len, int chunks, float eps, cudaStream_t stream) {
    const int64_t row_vec = row_len / 4, chunk_vec = row_vec / chunks;
    const dim3 grid(chunks, (unsigned)rows);
    chunk_stats<<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), x,
        reinterpret_cast<float2*>(partial), row_vec, chunk_vec, chunks);
    normalize<<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), x,
        reinterpret_cast<const float2*>(partial), reinterpret_cast<const float4*>(w),
        reinterpret_cast<const float4*>(b), reinterpret_cast<float4*>(y), row_vec, chunk_vec,
        chunks, 1.0 / (double)row_len, eps);
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

void layer_norm_launch(const float* x, const float* w, const float* b, float* y, float* partial,
                       int64_t rows, int64_t row_len, int chunks, float eps, cudaStream_t stream);

static bool aligned(const torch::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: CUDA float32 expected");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    const int64_t row_len = wc.numel();
    const int64_t rows = xc.numel() / row_len;
    const int chunks = 256;
    TORCH_CHECK(row_len % (4 * chunks) == 0, "the normalised size must be a multiple of 1024");
    TORCH_CHECK(aligned(xc) && aligned(wc) && aligned(bc), "16-byte aligned tensors expected");
    auto y = torch::empty_like(xc);
    auto partial = torch::empty({rows, chunks, 2}, xc.options());
    layer_norm_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                      y.data_ptr<float>(), partial.data_ptr<float>(), rows, row_len, chunks,
                      (float)eps, c10::cuda::getCurrentCUDAStream().stream());
    return y;
}
"""

ext = load_inline(name="layernorm_split_rows", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["layer_norm"], no_implicit_headers=True, use_pch=True)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.layer_norm(x, self.weight, self.bias, self.eps)
