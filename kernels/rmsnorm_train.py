"""RMSNorm forward and backward, written for problems/rmsnorm_train.py (evaluated with --backward).

y = x * rstd * w with rstd = rsqrt(mean(x^2) + eps), all in fp32, rows of any length N.
A torch.autograd.Function joins the two passes: forward saves x, w and rstd (4 bytes a row);
backward computes, per row, xhat = x * rstd, g = dy * w and
    dx = rstd * (g - xhat * mean(g * xhat)),   dw = sum over rows of dy * xhat.

Traffic at the problem's shape (16384 x 4096, 256 MiB a tensor): forward reads x and writes
y; backward reads dy and x and writes dx: five passes, 1.34 GB, ~0.33 ms at the 4.1 TB/s a device
copy reaches on an H200. Eager PyTorch makes a pass per operation both ways. torch.compile
(Inductor, torch 2.11) fuses each direction as this kernel does: its forward loops over each row
twice, the first pass keeping x in L2 (evict_last) for the second; its backward is one pass over
dy and x that writes dx and per-program partial rows of dw to a workspace, as bwd_rows does.

Fast path (N = 1024, 2048, 4096; 16-byte aligned): a row is T threads x VPT float4 (T = 256, 512,
512 and VPT = 1, 1, 2), loaded once into registers with plain 16-byte loads. On an H200 these beat the
read-only path (ld.global.nc) by 4-5% in both directions (133.5 against 139-141 us forward), and 512
threads a row beat 256 (one row per block, more blocks resident: the forward's 48 registers a thread
at 256 threads left 5 blocks an SM).
- fwd_row: one row per block, a shuffle-and-shared-memory sum, then y and rstd written.
- bwd_rows: a persistent grid (SMs x resident blocks), block b taking rows b, b + G, ...;
  each thread keeps its VPT float4 columns' dw partial sums in registers across its rows,
  so dy and x are read once and dw costs no extra pass. Each block writes its partial row
  once at the end; dw_reduce then sums the G partial rows per column in a fixed order (no
  float atomics: the same gradient every run).
Other rows (any N, unaligned): one block per row, scalar loads; the backward's partial rows
live in global memory (L2), zeroed first, each owned by one block.
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

namespace rmst {

constexpr int T = 256;  // threads per block of the general path and dw_reduce
constexpr int WARPS = T / 32;
constexpr unsigned FULL = 0xffffffffu;

// A plain 16-byte load, written out so that the compiler keeps it off the read-only path
// (const __restrict__ would let it choose ld.global.nc, measurably slower here).
__device__ __forceinline__ float4 ld4(const float4* p) {
  float4 v;
  asm volatile("ld.global.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}

// The block's sum of v, returned to every thread of a block of TB threads. `shared` holds
// TB / 32 floats; the trailing barrier lets the next call reuse it.
template <int TB>
__device__ __forceinline__ float block_sum(float v, float* shared) {
  constexpr int WARPS = TB / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  // each group of WARPS lanes holds every warp's sum, so every lane ends with the total
  float total = shared[lane & (WARPS - 1)];
#pragma unroll
  for (int o = WARPS / 2; o > 0; o >>= 1) total += __shfl_xor_sync(FULL, total, o);
  __syncthreads();
  return total;
}

template <int TB, int VPT>
__global__ void __launch_bounds__(TB, 2048 / TB) fwd_row(const float4* __restrict__ x, const float4* __restrict__ w,
                                             float4* __restrict__ y, float* __restrict__ rstd, float inv_n,
                                             float eps) {
  constexpr int T = TB;
  __shared__ float shared[T / 32];
  const long long row = blockIdx.x;
  const float4* xr = x + row * (VPT * T);
  float4 v[VPT];
  float sq = 0.f;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    v[i] = ld4(xr + i * T + threadIdx.x);
    sq = fmaf(v[i].x, v[i].x, fmaf(v[i].y, v[i].y, fmaf(v[i].z, v[i].z, fmaf(v[i].w, v[i].w, sq))));
  }
  const float r = rsqrtf(block_sum<T>(sq, shared) * inv_n + eps);
  float4* yr = y + row * (VPT * T);
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const float4 g = __ldg(w + i * T + threadIdx.x);
    yr[i * T + threadIdx.x] = make_float4(v[i].x * r * g.x, v[i].y * r * g.y, v[i].z * r * g.z, v[i].w * r * g.w);
  }
  if (threadIdx.x == 0) rstd[row] = r;
}

template <int TB, int VPT>
__global__ void __launch_bounds__(TB, 1024 / TB) bwd_rows(const float4* __restrict__ dy, const float4* __restrict__ x,
                                                 const float4* __restrict__ w, const float* __restrict__ rstd,
                                                 float4* __restrict__ dx, float4* __restrict__ partial,
                                                 long long rows, float inv_n) {
  constexpr int T = TB;
  __shared__ float shared[T / 32];
  float4 acc[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * (VPT * T);
    const float r = __ldg(rstd + row);
    float4 a[VPT], b[VPT];  // dy, then x * rstd
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      a[i] = ld4(dy + base + i * T + threadIdx.x);
      b[i] = ld4(x + base + i * T + threadIdx.x);
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const float4 g = __ldg(w + i * T + threadIdx.x);
      b[i] = make_float4(b[i].x * r, b[i].y * r, b[i].z * r, b[i].w * r);
      acc[i].x = fmaf(a[i].x, b[i].x, acc[i].x);
      acc[i].y = fmaf(a[i].y, b[i].y, acc[i].y);
      acc[i].z = fmaf(a[i].z, b[i].z, acc[i].z);
      acc[i].w = fmaf(a[i].w, b[i].w, acc[i].w);
      a[i] = make_float4(a[i].x * g.x, a[i].y * g.y, a[i].z * g.z, a[i].w * g.w);
      dot = fmaf(a[i].x, b[i].x, fmaf(a[i].y, b[i].y, fmaf(a[i].z, b[i].z, fmaf(a[i].w, b[i].w, dot))));
    }
    const float m = block_sum<T>(dot, shared) * inv_n;
#pragma unroll
    for (int i = 0; i < VPT; ++i)
      dx[base + i * T + threadIdx.x] = make_float4(r * (a[i].x - b[i].x * m), r * (a[i].y - b[i].y * m),
                                                   r * (a[i].z - b[i].z * m), r * (a[i].w - b[i].w * m));
  }
#pragma unroll
  for (int i = 0; i < VPT; ++i) partial[(long long)blockIdx.x * (VPT * T) + i * T + threadIdx.x] = acc[i];
}

// Any row length and alignment: scalar loads, the row read twice (the second time from L2).
__global__ void __launch_bounds__(T) fwd_general(const float* __restrict__ x, const float* __restrict__ w,
                                                 float* __restrict__ y, float* __restrict__ rstd, long long n,
                                                 float inv_n, float eps) {
  __shared__ float shared[WARPS];
  const long long row = blockIdx.x;
  const float* xr = x + row * n;
  float sq = 0.f;
  for (long long c = threadIdx.x; c < n; c += T) sq = fmaf(xr[c], xr[c], sq);
  const float r = rsqrtf(block_sum<T>(sq, shared) * inv_n + eps);
  for (long long c = threadIdx.x; c < n; c += T) y[row * n + c] = xr[c] * r * w[c];
  if (threadIdx.x == 0) rstd[row] = r;
}

// Any row length: block b owns partial row b (zeroed before the launch) and adds its rows' dy * xhat.
__global__ void __launch_bounds__(T) bwd_general(const float* __restrict__ dy, const float* __restrict__ x,
                                                 const float* __restrict__ w, const float* __restrict__ rstd,
                                                 float* __restrict__ dx, float* __restrict__ partial,
                                                 long long rows, long long n, float inv_n) {
  __shared__ float shared[WARPS];
  float* mine = partial + (long long)blockIdx.x * n;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* dr = dy + row * n;
    const float* xr = x + row * n;
    const float r = rstd[row];
    float dot = 0.f;
    for (long long c = threadIdx.x; c < n; c += T) dot = fmaf(dr[c] * w[c], xr[c] * r, dot);
    const float m = block_sum<T>(dot, shared) * inv_n;
    for (long long c = threadIdx.x; c < n; c += T) {
      const float xhat = xr[c] * r;
      dx[row * n + c] = r * (dr[c] * w[c] - xhat * m);
      mine[c] = fmaf(dr[c], xhat, mine[c]);
    }
  }
}

// dw[c] = sum over the `parts` partial rows, in a fixed order: 32 columns a block, 8 warps each
// summing every 8th partial row, then the 8 sums added in shared memory.
__global__ void __launch_bounds__(T) dw_reduce(const float* __restrict__ partial, float* __restrict__ dw,
                                               long long parts, long long n) {
  __shared__ float sums[WARPS][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long c = (long long)blockIdx.x * 32 + lane;
  float s = 0.f;
  if (c < n)
    for (long long p = warp; p < parts; p += WARPS) s += partial[p * n + c];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < n) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) total += sums[k][lane];
    dw[c] = total;
  }
}

template <int TB, int VPT>
int bwd_grid(int dev, long long rows) {
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bwd_rows<TB, VPT>, TB, 0);
  long long grid = (long long)sms * (per_sm > 0 ? per_sm : 1);
  return (int)(grid < rows ? grid : rows);
}

inline bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace rmst

// The row length where it and the pointers take the float4 path (1024, 2048 or 4096); 0: the scalar path.
static long long fast_n(long long n, const void* a, const void* b, const void* c, const void* d) {
  if (!(rmst::aligned(a) && rmst::aligned(b) && rmst::aligned(c) && rmst::aligned(d))) return 0;
  return n == 1024 || n == 2048 || n == 4096 ? n : 0;
}

const char* rmst_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

int rmst_forward(const float* x, const float* w, float* y, float* rstd, long long rows, long long n, float eps,
                 void* stream_ptr) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream_ptr);
  const float inv_n = 1.0f / (float)n;
  switch (fast_n(n, x, w, y, x)) {
    case 1024: rmst::fwd_row<256, 1><<<(unsigned)rows, 256, 0, s>>>((const float4*)x, (const float4*)w, (float4*)y, rstd, inv_n, eps); break;
    case 2048: rmst::fwd_row<512, 1><<<(unsigned)rows, 512, 0, s>>>((const float4*)x, (const float4*)w, (float4*)y, rstd, inv_n, eps); break;
    case 4096: rmst::fwd_row<512, 2><<<(unsigned)rows, 512, 0, s>>>((const float4*)x, (const float4*)w, (float4*)y, rstd, inv_n, eps); break;
    default: rmst::fwd_general<<<(unsigned)rows, rmst::T, 0, s>>>(x, w, y, rstd, n, inv_n, eps);
  }
  return (int)cudaGetLastError();
}

// The partial rows a backward needs (parts x n floats), for the caller to allocate.
long long rmst_parts(long long rows, long long n, int dev) {
  switch (n) {
    case 1024: return rmst::bwd_grid<256, 1>(dev, rows);
    case 2048: return rmst::bwd_grid<512, 1>(dev, rows);
    case 4096: return rmst::bwd_grid<512, 2>(dev, rows);
    default: {
      int sms = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      const long long grid = 4LL * sms;
      return grid < rows ? grid : rows;
    }
  }
}

int rmst_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                  float* partial, long long parts, long long rows, long long n, void* stream_ptr) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream_ptr);
  const float inv_n = 1.0f / (float)n;
  const unsigned grid = (unsigned)parts;
  switch (rmst::aligned(partial) ? fast_n(n, dy, x, w, dx) : 0) {
    case 1024: rmst::bwd_rows<256, 1><<<grid, 256, 0, s>>>((const float4*)dy, (const float4*)x, (const float4*)w, rstd, (float4*)dx, (float4*)partial, rows, inv_n); break;
    case 2048: rmst::bwd_rows<512, 1><<<grid, 512, 0, s>>>((const float4*)dy, (const float4*)x, (const float4*)w, rstd, (float4*)dx, (float4*)partial, rows, inv_n); break;
    case 4096: rmst::bwd_rows<512, 2><<<grid, 512, 0, s>>>((const float4*)dy, (const float4*)x, (const float4*)w, rstd, (float4*)dx, (float4*)partial, rows, inv_n); break;
    default:
      cudaMemsetAsync(partial, 0, sizeof(float) * parts * n, s);
      rmst::bwd_general<<<grid, rmst::T, 0, s>>>(dy, x, w, rstd, dx, partial, rows, n, inv_n);
  }
  rmst::dw_reduce<<<(unsigned)((n + 31) / 32), rmst::T, 0, s>>>(partial, dw, parts, n);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

const char* rmst_error_string(int code);
int rmst_forward(const float* x, const float* w, float* y, float* rstd, long long rows, long long n, float eps,
                 void* stream_ptr);
long long rmst_parts(long long rows, long long n, int dev);
int rmst_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                  float* partial, long long parts, long long rows, long long n, void* stream_ptr);

static void check(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32, "rmsnorm_train: ", name,
              " must be a float32 CUDA tensor");
}

std::vector<torch::Tensor> forward(torch::Tensor x, torch::Tensor weight, double eps) {
  check(x, "x");
  check(weight, "weight");
  TORCH_CHECK(weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0),
              "rmsnorm_train: the last dimension of x must equal the weight's size");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  const long long n = wc.numel(), rows = n > 0 ? xc.numel() / n : 0;
  auto y = torch::empty_like(xc);
  auto rstd = torch::empty({rows}, xc.options());
  if (rows > 0) {
    void* stream = (void*)c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
    const int err = rmst_forward(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(),
                                 rstd.data_ptr<float>(), rows, n, (float)eps, stream);
    TORCH_CHECK(err == 0, "rmsnorm_train forward: ", rmst_error_string(err));
  }
  return {y, rstd};
}

std::vector<torch::Tensor> backward(torch::Tensor dy, torch::Tensor x, torch::Tensor weight, torch::Tensor rstd) {
  check(dy, "the upstream gradient");
  c10::cuda::CUDAGuard guard(x.device());
  auto dyc = dy.contiguous();
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  const long long n = wc.numel(), rows = n > 0 ? xc.numel() / n : 0;
  auto dx = torch::empty_like(xc);
  auto dw = torch::empty_like(wc);
  if (rows == 0) dw.zero_();
  if (rows > 0) {
    const int dev = x.device().index();
    const long long parts = rmst_parts(rows, n, dev);
    auto partial = torch::empty({parts, n}, xc.options());
    void* stream = (void*)c10::cuda::getCurrentCUDAStream(dev).stream();
    const int err = rmst_backward(dyc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                                  rstd.data_ptr<float>(), dx.data_ptr<float>(), dw.data_ptr<float>(),
                                  partial.data_ptr<float>(), parts, rows, n, stream);
    TORCH_CHECK(err == 0, "rmsnorm_train backward: ", rmst_error_string(err));
  }
  return {dx, dw};
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo"]
_NAME = "rmsnorm_train_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["forward", "backward"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = _ext.forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _ext.backward(dy, x, weight, rstd)
        return dx, dw, None


class ModelNew(nn.Module):
    """Drop-in for Model: RMSNorm over the last dimension with a learnable weight, trained through."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, float(self.eps))
