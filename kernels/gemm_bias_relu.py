"""y = relu(x @ W^T + b) (nn.Linear + ReLU), written for problems/gemm_bias_relu.py.

Plain fp32 FFMA GEMM on the CUDA cores (no tensor cores), bias and ReLU fused into the
epilogue.  x (M, K) and W (N, K) are both K-contiguous ("TN" GEMM).

Fast path (M % 128 == 0, N % 128 == 0, K % 8 == 0, 16-byte aligned pointers): block tile
128 x 128 x 8, 256 threads (8 warps of 32 x 64), 8 x 8 outputs per thread in registers
(64 accumulators), one float4 global load per operand row chunk along K into registers,
issued one k-tile ahead, stored transposed (k-major, rows padded by 4 floats) into one of two
shared-memory buffers; the math reads 4 consecutive rows/columns per 128-bit shared load:
64 FFMA per 4 LDS.128 per k.  One barrier per k-tile.  Blocks walk the tiles in groups of
16 tile-rows so that resident blocks share x and W rows in L2.  x and W are read from HBM
about once per group (~1-3 GB in all), y written once (256 MB).
Compute-bound: 1.1 TFLOP at the ~51 TFLOP/s cuBLAS SGEMM reaches on H100 is ~21.6 ms; this
kernel aims at that (~21-25 ms expected).

General path (any other shape or alignment): 64 x 64 tiles, bounds-checked scalar loads,
4 x 4 outputs per thread, same fp32 FMA arithmetic.
"""
import hashlib
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

// y = relu(A B^T + bias): A = x (M x K, row-major), B = W (N x K, row-major), y (M x N).
namespace gbr {

// relu that keeps NaN (as torch does): NaN < 0 is false
__device__ __forceinline__ float relu_f(float v) { return v < 0.f ? 0.f : v; }

// Grouped tile order: GROUP tile-rows at a time, tile-rows fastest inside a group, so the
// blocks resident at once share a small set of x rows and W rows in L2.
__device__ __forceinline__ void tile_of(int pid, int tiles_m, int tiles_n, int group_m,
                                        int& tm, int& tn) {
  const int width = group_m * tiles_n;
  const int grp = pid / width;
  const int first = grp * group_m;
  const int gsz = min(tiles_m - first, group_m);
  const int local = pid - grp * width;
  tm = first + local % gsz;
  tn = local / gsz;
}

// ---------------------------------------------------------------- general path
// Any M, N, K, any alignment: 64 x 64 tile, 256 threads, 4 x 4 outputs per thread,
// bounds-checked scalar loads into shared memory, plain fp32 FMA.
constexpr int GT = 64, GK = 16;
__global__ void __launch_bounds__(256)
gen_gemm(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
         float* __restrict__ C, int M, int N, int K) {
  __shared__ float sA[GK][GT + 1];
  __shared__ float sB[GK][GT + 1];
  const int tiles_n = (N + GT - 1) / GT;
  const int bm = (int)(blockIdx.x / tiles_n) * GT;
  const int bn = (int)(blockIdx.x % tiles_n) * GT;
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += GK) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int e = tid + l * 256, r = e >> 4, k = e & 15;
      const int gk = k0 + k;
      sA[k][r] = (bm + r < M && gk < K) ? A[(size_t)(bm + r) * K + gk] : 0.f;
      sB[k][r] = (bn + r < N && gk < K) ? B[(size_t)(bn + r) * K + gk] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < GK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) { a[i] = sA[k][ty + 16 * i]; b[i] = sB[k][tx + 16 * i]; }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = bm + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = bn + tx + 16 * j;
      if (r < M && c < N) C[(size_t)r * N + c] = relu_f(acc[i][j] + bias[c]);
    }
  }
}

static int launch_general(const float* x, const float* w, const float* b, float* y,
                          long long M, long long N, long long K, cudaStream_t stream) {
  const long long tiles = ((M + GT - 1) / GT) * ((N + GT - 1) / GT);
  if (tiles > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
  gen_gemm<<<(unsigned)tiles, 256, 0, stream>>>(x, w, b, y, (int)M, (int)N, (int)K);
  return (int)cudaGetLastError();
}

constexpr int GROUP_M = 16;

// ---------------------------------------------------------------- fast path: SIMT fp32
// Block tile BM x BN x BK, 256 threads (8 warps).  A thread owns 8 rows (two groups of 4,
// 16 apart) by TN columns (TN/4 groups of 4, 32 apart); a warp is 4 x 8 threads, so a warp
// tile is 32 x 8*TN.  Both operands are K-contiguous: each k-tile is read from global
// memory as float4 along K into registers (issued before the math of the current k-tile),
// then written transposed (k-major) into the other of two shared-memory buffers, so the
// math reads 4 consecutive rows / columns with one 128-bit load.  Rows padded by 4 floats
// keep the transposed stores free of bank conflicts (BK = 8).
template <int BM, int BN, int BK, int TN, int MINB>
__global__ void __launch_bounds__(256, MINB)
simt_gemm(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
          float* __restrict__ C, int M, int N, int K, int group_m) {
  constexpr int T = 256;
  constexpr int WTN = 8 * TN;
  constexpr int WARPS_M = BM / 32;
  constexpr int WARPS_N = BN / WTN;
  static_assert(WARPS_M * WARPS_N == 8, "eight warps");
  static_assert(TN % 4 == 0 && BK % 4 == 0, "vector widths");
  constexpr int LDA = BM + 4, LDB = BN + 4;
  constexpr int KQ = BK / 4;          // float4 per row per k-tile
  constexpr int RSTEP = T / KQ;       // rows per load round
  constexpr int A_LD = BM / RSTEP, B_LD = BN / RSTEP;
  static_assert(A_LD * RSTEP == BM && B_LD * RSTEP == BN, "load split");
  __shared__ __align__(16) float sA[2][BK][LDA];
  __shared__ __align__(16) float sB[2][BK][LDB];

  int tm, tn;
  tile_of((int)blockIdx.x, M / BM, N / BN, group_m, tm, tn);
  const int bm = tm * BM, bn = tn * BN;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;
  const int row0 = wm * 32 + (lane >> 3) * 4;   // rows row0 + {0..3}, row0 + 16 + {0..3}
  const int col0 = wn * WTN + (lane & 7) * 4;   // cols col0 + 32 j + {0..3}

  const int lr = tid / KQ, lq = tid % KQ;
  const float* pA = A + (size_t)(bm + lr) * K + lq * 4;
  const float* pB = B + (size_t)(bn + lr) * K + lq * 4;
  const size_t stepRows = (size_t)RSTEP * K;

  float4 ra[A_LD], rb[B_LD];
  float acc[8][TN];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  auto gload = [&](int k0) {
#pragma unroll
    for (int l = 0; l < A_LD; ++l) ra[l] = __ldg(reinterpret_cast<const float4*>(pA + l * stepRows + k0));
#pragma unroll
    for (int l = 0; l < B_LD; ++l) rb[l] = __ldg(reinterpret_cast<const float4*>(pB + l * stepRows + k0));
  };
  auto sstore = [&](int buf) {
#pragma unroll
    for (int l = 0; l < A_LD; ++l) {
      const int r = lr + l * RSTEP;
      sA[buf][lq * 4 + 0][r] = ra[l].x;
      sA[buf][lq * 4 + 1][r] = ra[l].y;
      sA[buf][lq * 4 + 2][r] = ra[l].z;
      sA[buf][lq * 4 + 3][r] = ra[l].w;
    }
#pragma unroll
    for (int l = 0; l < B_LD; ++l) {
      const int r = lr + l * RSTEP;
      sB[buf][lq * 4 + 0][r] = rb[l].x;
      sB[buf][lq * 4 + 1][r] = rb[l].y;
      sB[buf][lq * 4 + 2][r] = rb[l].z;
      sB[buf][lq * 4 + 3][r] = rb[l].w;
    }
  };

  const int KT = K / BK;
  gload(0);
  sstore(0);
  __syncthreads();
  for (int kt = 0; kt < KT; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < KT) gload((kt + 1) * BK);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[8], b[TN];
      const float4 a0 = *reinterpret_cast<const float4*>(&sA[buf][k][row0]);
      const float4 a1 = *reinterpret_cast<const float4*>(&sA[buf][k][row0 + 16]);
      a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
      a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
#pragma unroll
      for (int j = 0; j < TN / 4; ++j) {
        const float4 bv = *reinterpret_cast<const float4*>(&sB[buf][k][col0 + 32 * j]);
        b[4 * j + 0] = bv.x; b[4 * j + 1] = bv.y; b[4 * j + 2] = bv.z; b[4 * j + 3] = bv.w;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (kt + 1 < KT) sstore(buf ^ 1);
    __syncthreads();
  }

  // epilogue: bias + relu, float4 stores (a warp writes 4 rows x 128 contiguous bytes)
  float4 bb[TN / 4];
#pragma unroll
  for (int j = 0; j < TN / 4; ++j) bb[j] = __ldg(reinterpret_cast<const float4*>(bias + bn + col0 + 32 * j));
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = bm + row0 + (i >> 2) * 16 + (i & 3);
    float* crow = C + (size_t)row * N + bn + col0;
#pragma unroll
    for (int j = 0; j < TN / 4; ++j) {
      float4 o;
      o.x = relu_f(acc[i][4 * j + 0] + bb[j].x);
      o.y = relu_f(acc[i][4 * j + 1] + bb[j].y);
      o.z = relu_f(acc[i][4 * j + 2] + bb[j].z);
      o.w = relu_f(acc[i][4 * j + 3] + bb[j].w);
      *reinterpret_cast<float4*>(crow + 32 * j) = o;
    }
  }
}

template <int BM, int BN, int BK, int TN, int MINB>
static int launch_simt(const float* x, const float* w, const float* b, float* y,
                       long long M, long long N, long long K, cudaStream_t stream, bool* taken) {
  *taken = false;
  const bool al16 = (((uintptr_t)x | (uintptr_t)w | (uintptr_t)b | (uintptr_t)y) & 15) == 0;
  if (!al16 || K <= 0 || M % BM != 0 || N % BN != 0 || K % BK != 0) return 0;
  const long long tiles = (M / BM) * (N / BN);
  if (tiles > 0x7fffffffLL) return 0;
  *taken = true;
  simt_gemm<BM, BN, BK, TN, MINB><<<(unsigned)tiles, 256, 0, stream>>>(
      x, w, b, y, (int)M, (int)N, (int)K, GROUP_M);
  return (int)cudaGetLastError();
}

}  // namespace gbr

const char* gbr_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// Returns a cudaError_t code (0 = success).
int gbr_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
               long long K, void* stream_ptr) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  if (M <= 0 || N <= 0) return 0;
  bool taken = false;
  const int err = gbr::launch_simt<128, 128, 8, 8, 2>(x, w, b, y, M, N, K, stream, &taken);
  if (taken || err) return err;
  return gbr::launch_general(x, w, b, y, M, N, K, stream);
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

const char* gbr_error_string(int code);
int gbr_launch(const float* x, const float* w, const float* b, float* y, long long M, long long N,
               long long K, void* stream_ptr);

torch::Tensor gbr_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "gemm_bias_relu: CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
              bias.scalar_type() == torch::kFloat32, "gemm_bias_relu: float32 tensors expected");
  TORCH_CHECK(weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "gemm_bias_relu: weight (out, in) and bias (out) expected");
  TORCH_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) == weight.size(1),
              "gemm_bias_relu: last dim of x must equal in_features");
  TORCH_CHECK(x.device() == weight.device() && x.device() == bias.device(), "gemm_bias_relu: devices differ");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t N = wc.size(0), K = wc.size(1);
  int64_t M = 1;
  for (int64_t d = 0; d + 1 < xc.dim(); ++d) M *= xc.size(d);
  std::vector<int64_t> out_sizes(xc.sizes().begin(), xc.sizes().end());
  out_sizes.back() = N;
  auto y = torch::empty(out_sizes, xc.options());
  if (M == 0 || N == 0) return y;
  TORCH_CHECK(M <= 0x7fffffffLL && N <= 0x7fffffffLL && K <= 0x7fffffffLL, "gemm_bias_relu: dims too large");
  void* stream = (void*)c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const int err = gbr_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                             y.data_ptr<float>(), M, N, K, stream);
  TORCH_CHECK(err == 0, "gemm_bias_relu kernel launch failed: ", gbr_error_string(err));
  return y;
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo"]
_NAME = "gemm_bias_relu_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["gbr_forward"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)


class _LinearParams(nn.Module):
    """The parameters of nn.Linear(in, out) under the same names: weight (out, in), bias (out)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        # nn.Linear's initialisation
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        nn.init.uniform_(self.bias, -bound, bound)


class ModelNew(nn.Module):
    """Drop-in for Model: y = relu(x W^T + b), parameters as nn.Linear's (linear.weight, linear.bias)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = _LinearParams(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gbr_forward(x, self.linear.weight, self.linear.bias)
