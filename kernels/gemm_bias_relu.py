"""y = relu(x @ W^T + b) (nn.Linear + ReLU) at fp32 accuracy on the tensor cores ("3xTF32").

Every fp32 operand v is split exactly into hi + lo: hi = v with the 13 low mantissa bits
cleared (exact on the tensor core's 10-bit-mantissa input path), lo = v - hi (exact in fp32).
The product is accumulated in fp32 as lo_x*hi_w + hi_x*lo_w + hi_x*hi_w with
mma.sync m16n8k8 (3 tensor-core MMAs per product), the scheme CUTLASS uses for fp32
emulation.  Dropped: lo_x*lo_w (< 2^-20 relative) and lo's bits beyond 10 mantissa bits
(< 2^-20 relative).  The tensor core's fp32 accumulation truncates (rounds toward zero), a
bias that grows with K: over K = 8192 it reached 2.1e-4 (mean -2.3e-5), enough to fail
atol = rtol = 1e-4 on one output in 67 M now and then.  So each k-tile's 12 mma steps go to
fresh accumulators that are then added to the running sums with IEEE fp32 adds.  Measured
on the problem's shape against a float64 product: max |error| 3.6e-6 to 4.3e-6, against
1.2e-5 to 1.7e-5 for cuBLAS's fp32 SGEMM (TF32 off).
Limitation: an infinite input element gives NaN (inf - inf in the split) where the fp32
reference may give inf.

Fast path (K % 4 == 0, x and W 16-byte aligned; any M, N: rows past the end are
zero-filled, stores are bounds-checked): block tile 128 x 128 x 32, 8 warps of 64 x 32
(4 x 4 m16n8 tiles, 64 fp32 running sums + 64 per-tile accumulators per thread),
4-stage cp.async pipeline (128 KB shared memory per block, 1 block per SM).  Shared memory keeps the
K-contiguous rows (32 floats) with the 16-byte chunk index XORed with (row & 7), so the
32-bit fragment loads are free of bank conflicts; fragments load straight into the mma's
operand registers and are split there.  Bias + ReLU in the epilogue, float2 stores.  Tiles
walk in groups of 16 tile-rows for L2 reuse.
Measured on an H100 (CUDA events, ms): this kernel 15.5; with 3 stages 16.9; without the
per-tile promotion (3 stages, 2 blocks per SM) 14.7 but not accurate enough; cuBLAS SGEMM
21.4; a plain fp32 FFMA kernel (128 x 128 x 8 tiles, 8 x 8 outputs per thread) 23.9.
Warp tiles of 64 x 64 (JB = 2) failed the check, most likely from the same truncation, and
are not used; JB stays 1.

General path (K % 4 != 0 or unaligned): 64 x 64 tiles, bounds-checked scalar loads, plain
fp32 FMA.
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
constexpr int JB = 1;   // n8 tiles per B-fragment batch

// ---------------------------------------------------------------- fast path: split-fp32 tensor cores
// Each fp32 operand v is split exactly as v = hi + lo, hi = v with the 13 low mantissa bits
// cleared (a 10-bit-mantissa value the tensor core takes exactly) and lo = v - hi (exact);
// the product is accumulated as lo_a*hi_b + hi_a*lo_b + hi_a*hi_b in fp32 accumulators
// (lo_a*lo_b, below 2^-20 relative, is dropped; the tensor core reads lo to 10 mantissa
// bits, a further error below 2^-20 relative).  This is the 3-pass scheme CUTLASS uses to
// emulate fp32 GEMM on tensor cores; accuracy is that of an fp32 GEMM.
//
// Block tile BM x BN x 32, warps of WM x WN (m16n8k8 tiles: WM/16 x WN/8 per warp),
// STAGES-deep cp.async pipeline.  Shared memory keeps each operand tile as rows of 32 floats
// (K-contiguous, as in global memory) with the 16-byte chunk index XORed with (row & 7), so
// the 32-bit fragment loads (8 rows x 4 consecutive k per warp) hit 32 distinct banks.
// Fragments are loaded straight into the registers the mma takes (no moves); hi is the raw
// value (the mma ignores the 13 low bits, so clearing them is only needed to form lo).
namespace sp3 {
constexpr int BK = 32;

__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp16z(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;   // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

__device__ __forceinline__ void split2(float v, uint32_t& hi, uint32_t& lo) {
  const uint32_t h = __float_as_uint(v) & 0xffffe000u;
  hi = h;
  lo = __float_as_uint(v - __uint_as_float(h));
}

// D = A(16x8) * B(8x8) + D on the tensor cores, 10-bit-mantissa inputs, fp32 accumulate
__device__ __forceinline__ void mma_k8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BM, int BN, int WM, int WN, int STAGES, int MINB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
gemm3(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
      float* __restrict__ C, int M, int N, int K, int group_m) {
  constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  constexpr int NT = WARPS_M * WARPS_N * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  constexpr int RS = NT / 8;                 // rows per copy round (8 chunks of 16 B per row)
  constexpr int A_CP = BM / RS, B_CP = BN / RS;
  static_assert(A_CP * RS == BM && B_CP * RS == BN && RS % 8 == 0, "copy split");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile");
  extern __shared__ __align__(16) float smem[];
  float* sA = smem;                          // STAGES x BM x BK
  float* sB = smem + STAGES * BM * BK;       // STAGES x BN x BK

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  int tm, tn;
  tile_of((int)blockIdx.x, tiles_m, tiles_n, group_m, tm, tn);
  const int bm = tm * BM, bn = tn * BN;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;
  const int g = lane >> 2, t = lane & 3;

  // copies: thread -> chunk ckc (4 floats along K) of rows crow + i*RS
  const int crow = tid >> 3, ckc = tid & 7;
  const int cdst = crow * BK + ((ckc ^ (crow & 7)) << 2);   // same for every round (RS % 8 == 0)
  const float* gA = A + (size_t)(bm + crow) * K + ckc * 4;
  const float* gB = B + (size_t)(bn + crow) * K + ckc * 4;
  unsigned amask = 0, bmask = 0;
#pragma unroll
  for (int i = 0; i < A_CP; ++i) amask |= (bm + crow + i * RS < M) ? (1u << i) : 0u;
#pragma unroll
  for (int i = 0; i < B_CP; ++i) bmask |= (bn + crow + i * RS < N) ? (1u << i) : 0u;
  const uint32_t sA0 = (uint32_t)__cvta_generic_to_shared(sA) + cdst * 4;
  const uint32_t sB0 = (uint32_t)__cvta_generic_to_shared(sB) + cdst * 4;

  const bool interior = (bm + BM <= M) && (bn + BN <= N);
  const size_t strideA = (size_t)RS * K;
  auto load_stage = [&](int kt, int slot) {
    const int k0 = kt * BK;
    const uint32_t da = sA0 + (uint32_t)(slot * BM * BK * 4);
    const uint32_t db = sB0 + (uint32_t)(slot * BN * BK * 4);
    const float* pa = gA + k0;
    const float* pb = gB + k0;
    if (interior && k0 + BK <= K) {
#pragma unroll
      for (int i = 0; i < A_CP; ++i) cp16(da + i * RS * BK * 4, pa + i * strideA);
#pragma unroll
      for (int i = 0; i < B_CP; ++i) cp16(db + i * RS * BK * 4, pb + i * strideA);
    } else {
      const bool kv = k0 + ckc * 4 < K;
#pragma unroll
      for (int i = 0; i < A_CP; ++i) {
        const bool v = kv && ((amask >> i) & 1u);
        cp16z(da + i * RS * BK * 4, v ? (const void*)(pa + i * strideA) : (const void*)A, v);
      }
#pragma unroll
      for (int i = 0; i < B_CP; ++i) {
        const bool v = kv && ((bmask >> i) & 1u);
        cp16z(db + i * RS * BK * 4, v ? (const void*)(pb + i * strideA) : (const void*)B, v);
      }
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  const int KT = (K + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_commit();
  }

  // fragment reads: row (warp base + g) of the tile; logical k (8s + t) sits in chunk 2s,
  // k (8s + t + 4) in chunk 2s + 1, both XORed with (row & 7) = g.
  const int aoff = (wm * WM + g) * BK + t;
  const int boff = (wn * WN + g) * BK + t;

  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();
    {
      const int nk = kt + STAGES - 1;
      if (nk < KT) load_stage(nk, nk % STAGES);
      cp_commit();
    }
    const int slot = kt % STAGES;
    // This k-tile's products go to fresh tensor-core accumulators and are then added to acc
    // with IEEE fp32 adds: the tensor core's own accumulation truncates, and over all of K
    // that bias reached 1e-4 on outputs near 0.05 (one element in 67 M off by more than
    // the check's atol + rtol * |y|).  Over one k-tile it stays below 1e-8.
    float part[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[i][j][e] = 0.f;
    const float* a_s = sA + slot * BM * BK + aoff;
    const float* b_s = sB + slot * BN * BK + boff;
#pragma unroll
    for (int s = 0; s < BK / 8; ++s) {
      const int k0 = ((2 * s) ^ g) << 2;       // k = 8s + t
      const int k1 = ((2 * s + 1) ^ g) << 2;   // k = 8s + t + 4
      uint32_t ah[MI][4], al[MI][4];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        split2(a_s[(i * 16) * BK + k0], ah[i][0], al[i][0]);       // row g,     k t
        split2(a_s[(i * 16 + 8) * BK + k0], ah[i][1], al[i][1]);   // row g + 8, k t
        split2(a_s[(i * 16) * BK + k1], ah[i][2], al[i][2]);       // row g,     k t + 4
        split2(a_s[(i * 16 + 8) * BK + k1], ah[i][3], al[i][3]);   // row g + 8, k t + 4
      }
#pragma unroll
      for (int jb = 0; jb < NI; jb += JB) {
        uint32_t bh[JB][2], bl[JB][2];
#pragma unroll
        for (int jj = 0; jj < JB; ++jj) {
          split2(b_s[((jb + jj) * 8) * BK + k0], bh[jj][0], bl[jj][0]);   // col g, k t
          split2(b_s[((jb + jj) * 8) * BK + k1], bh[jj][1], bl[jj][1]);   // col g, k t + 4
        }
        // small terms first, then the big one; JB*MI independent accumulators per pass
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int jj = 0; jj < JB; ++jj) mma_k8(part[i][jb + jj], al[i], bh[jj]);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int jj = 0; jj < JB; ++jj) mma_k8(part[i][jb + jj], ah[i], bl[jj]);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int jj = 0; jj < JB; ++jj) mma_k8(part[i][jb + jj], ah[i], bh[jj]);
      }
    }
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
  }
  cp_wait<0>();

  // epilogue: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at row g + 8; bias + relu
  const bool vec2 = ((N & 1) == 0) && ((((uintptr_t)C) & 7) == 0);
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int col = bn + wn * WN + j * 8 + 2 * t;
    if (col >= N) continue;
    const bool two = col + 1 < N;
    const float b0 = __ldg(bias + col);
    const float b1 = two ? __ldg(bias + col + 1) : 0.f;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = bm + wm * WM + i * 16 + g + 8 * h;
        if (row >= M) continue;
        const float o0 = relu_f(acc[i][j][2 * h] + b0);
        const float o1 = relu_f(acc[i][j][2 * h + 1] + b1);
        float* p = C + (size_t)row * N + col;
        if (vec2 && two) {
          *reinterpret_cast<float2*>(p) = make_float2(o0, o1);
        } else {
          p[0] = o0;
          if (two) p[1] = o1;
        }
      }
    }
  }
}
}  // namespace sp3

template <int BM, int BN, int WM, int WN, int STAGES, int MINB>
static int launch_split3(const float* x, const float* w, const float* b, float* y,
                         long long M, long long N, long long K, cudaStream_t stream, bool* taken) {
  *taken = false;
  const bool al16 = ((((uintptr_t)x) | ((uintptr_t)w)) & 15) == 0;
  if (!al16 || K <= 0 || K % 4 != 0) return 0;
  const long long tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  if (tiles > 0x7fffffffLL) return 0;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr size_t smem = (size_t)STAGES * (BM + BN) * sp3::BK * sizeof(float);
  auto kern = sp3::gemm3<BM, BN, WM, WN, STAGES, MINB>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return (int)e;
  *taken = true;
  kern<<<(unsigned)tiles, NT, smem, stream>>>(x, w, b, y, (int)M, (int)N, (int)K, GROUP_M);
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
  const int err = gbr::launch_split3<128, 128, 64, 32, 4, 1>(x, w, b, y, M, N, K, stream, &taken);
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
