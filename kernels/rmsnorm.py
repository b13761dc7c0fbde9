"""RMSNorm over the last dimension, written for problems/rmsnorm.py.

y = (x * rsqrt(mean(x^2) + eps)) * weight, all in fp32, for x of any shape (..., N).

Fast path (N % 4 == 0, 16-byte aligned pointers, 2048 < N <= 4096; the problem's rows
are N = 4096 = 16 KiB): rms_row (_MODE = 1), one row per block, not persistent.
Grid = rows (32768 blocks of 256 threads); each thread loads its 4 float4 of x
(ld.global.nc.L1::no_allocate) into registers, reduces (shuffles + one shared-memory
exchange), then writes y, reading its 4 weight float4s through L1 (__ldg) for every row.
__launch_bounds__(256, 8): 32 registers, 8 blocks = 2048 threads per SM, so ~8 rows
(128 KiB) of loads in flight per SM, kept there by the hardware block scheduler instead
of a software pipeline.  x read once, y written once.
Measured on an H100 (harness protocol): rms_row 0.445 ms; rms_pipe (_MODE = 0, a
persistent block with a 3-stage cp.async ring) 0.520 ms; persistent with register
prefetch 0.473 ms.  By do_bench (GPU time, three rounds): rms_row 0.364 ms against
torch.compile's 0.357; variants of rms_row: 512 threads a row 0.362, 1024 threads 0.404,
y stored with an L2 evict_first policy 0.369, x loaded with an L2::256B hint 0.365.
HBM traffic: x read once (512 MiB), y written once (512 MiB), weight 16 KiB: 1.07 GB,
~0.37 ms at the 2.9 TB/s a device copy reaches.

Other shapes: rms_tile (register tile, several rows per block for short rows, next row
prefetched into registers, weight in registers, persistent) for N % 4 == 0 up to 16384
and, as scalars, for N % 4 != 0 or unaligned pointers up to N = 4096; for longer rows
a two-pass kernel (one block per row, sum of squares in double, second read of the row,
mostly from L2, to normalise).
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Configuration of the fast path for 2048 < N <= 4096 (N % 4 == 0): see the MODE
# table in rms_launch.  0: rms_pipe, 256 threads per row, 3-stage cp.async ring;
# 1: rms_row, one row per block (the fastest measured).
_MODE = 1

_CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

namespace rmsk {

constexpr unsigned FULL = 0xffffffffu;

template <int VEC> struct VT;
template <> struct VT<4> { typedef float4 type; };
template <> struct VT<1> { typedef float type; };

__device__ __forceinline__ void zero(float4& v) { v = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void zero(float& v) { v = 0.f; }

__device__ __forceinline__ float sq_acc(const float4& v, float a) {
  return fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, a))));
}
__device__ __forceinline__ float sq_acc(const float& v, float a) { return fmaf(v, v, a); }
__device__ __forceinline__ double sq_acc_d(const float4& v, double a) {
  const double x = v.x, y = v.y, z = v.z, w = v.w;
  return fma(w, w, fma(z, z, fma(y, y, fma(x, x, a))));
}
__device__ __forceinline__ double sq_acc_d(const float& v, double a) {
  const double x = v;
  return fma(x, x, a);
}

// y = (x * rstd) * w, two roundings like the reference
__device__ __forceinline__ float4 norm(const float4& v, float rstd, const float4& w) {
  return make_float4(__fmul_rn(__fmul_rn(v.x, rstd), w.x), __fmul_rn(__fmul_rn(v.y, rstd), w.y),
                     __fmul_rn(__fmul_rn(v.z, rstd), w.z), __fmul_rn(__fmul_rn(v.w, rstd), w.w));
}
__device__ __forceinline__ float norm(const float& v, float rstd, const float& w) {
  return __fmul_rn(__fmul_rn(v, rstd), w);
}

// rsqrt(mean + eps): mean = sum * (1/N) rounded, then + eps rounded (no fma contraction)
__device__ __forceinline__ float rstd_of(float ss, float invN, float eps) {
  return rsqrtf(__fadd_rn(__fmul_rn(ss, invN), eps));
}

// HINT 0: ld.global.nc.L1::no_allocate, plain store; 1: ld.global.cs / st.global.cs;
// 2: __ldg (ld.global.nc), plain store.
template <int HINT>
__device__ __forceinline__ float4 ldx(const float4* p) {
  if (HINT == 2) return __ldg(p);
  float4 v;
  if (HINT == 1)
    asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
template <int HINT>
__device__ __forceinline__ float ldx(const float* p) {
  if (HINT == 2) return __ldg(p);
  float v;
  if (HINT == 1) asm volatile("ld.global.cs.f32 %0, [%1];" : "=f"(v) : "l"(p));
  else asm volatile("ld.global.nc.L1::no_allocate.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
template <int HINT>
__device__ __forceinline__ void sty(float4* p, const float4& v) {
  if (HINT == 1)
    asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
  else
    *p = v;
}
template <int HINT>
__device__ __forceinline__ void sty(float* p, const float& v) {
  if (HINT == 1) asm volatile("st.global.cs.f32 [%0], %1;" :: "l"(p), "f"(v));
  else *p = v;
}

// ---------------------------------------------------------------- register-tiled kernel
// A block of T = TPR * RPB threads handles RPB rows at a time: group g = tid / TPR owns
// row rb + g, its thread t = tid % TPR holds vectors t + k*TPR (k < VPT) of the row
// (nv <= TPR * VPT vectors of VEC floats per row; slots past nv hold zeros and are not
// stored).  The block walks rows rb = blockIdx.x * RPB, + gridDim.x * RPB, ...; with
// PF it loads the next row into `nxt` before it reduces and writes `cur` (ptxas may
// still sink those non-coherent loads below the reduction), without PF it loads each
// row at the top of its iteration.  The weight's vectors stay in registers for the
// whole launch.  The loop condition only depends on the block, so every thread reaches
// every __syncthreads.
template <int VEC, int TPR, int RPB, int VPT, int HINT, int MINB, bool PF>
__global__ void __launch_bounds__(TPR * RPB, MINB)
rms_tile(const float* __restrict__ xf, const float* __restrict__ wf, float* __restrict__ yf,
         long long rows, int nv, float invN, float eps) {
  typedef typename VT<VEC>::type V;
  constexpr int T = TPR * RPB;
  constexpr int NW = T / 32 > 0 ? T / 32 : 1;   // warps per block
  constexpr int WPR = TPR >= 32 ? TPR / 32 : 1;  // warps per row (TPR > 32)
  static_assert(TPR <= 32 ? (32 % TPR == 0) : (TPR % 32 == 0), "TPR: divisor or multiple of 32");
  static_assert(T % 32 == 0, "whole warps");
  __shared__ float red[2][NW];

  const V* __restrict__ x = reinterpret_cast<const V*>(xf);
  const V* __restrict__ w = reinterpret_cast<const V*>(wf);
  V* __restrict__ y = reinterpret_cast<V*>(yf);
  const int tid = threadIdx.x;
  const int g = tid / TPR;
  const int t = tid - g * TPR;
  const long long stride = (long long)gridDim.x * RPB;

  V wr[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = t + k * TPR;
    if (idx < nv) wr[k] = __ldg(w + idx); else zero(wr[k]);
  }

  long long rb = (long long)blockIdx.x * RPB;  // block's first row this iteration
  long long r = rb + g;                          // this group's row
  V cur[VPT];
  if constexpr (PF) {
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = t + k * TPR;
      if (r < rows && idx < nv) cur[k] = ldx<HINT>(x + (size_t)r * nv + idx); else zero(cur[k]);
    }
  }

  int it = 0;
  for (; rb < rows; rb += stride, r += stride, ++it) {
    V nxt[VPT];
    if constexpr (PF) {
      // next row of this group (if any) into registers first
      const long long rn = r + stride;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int idx = t + k * TPR;
        if (rn < rows && idx < nv) nxt[k] = ldx<HINT>(x + (size_t)rn * nv + idx); else zero(nxt[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int idx = t + k * TPR;
        if (r < rows && idx < nv) cur[k] = ldx<HINT>(x + (size_t)r * nv + idx); else zero(cur[k]);
      }
    }

    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) ss = sq_acc(cur[k], ss);
    if constexpr (TPR <= 32) {
      // groups of TPR lanes inside one warp: xor offsets below TPR stay in the group
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
    } else {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
      float* rd = red[it & 1];
      if ((tid & 31) == 0) rd[tid >> 5] = ss;
      __syncthreads();
      // every thread of the group sums its WPR warp partials in the same order
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < WPR; ++j) s += rd[g * WPR + j];
      ss = s;
      // red[it & 1] is written again only in iteration it + 2, after every thread has
      // passed the __syncthreads of iteration it + 1, i.e. finished reading it here.
    }
    const float rstd = rstd_of(ss, invN, eps);

    if (r < rows) {
      V* yr = y + (size_t)r * nv;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int idx = t + k * TPR;
        if (idx < nv) sty<HINT>(yr + idx, norm(cur[k], rstd, wr[k]));
      }
    }
    if constexpr (PF) {
#pragma unroll
      for (int k = 0; k < VPT; ++k) cur[k] = nxt[k];
    }
  }
}

// ---------------------------------------------------------------- one row per block
// Not persistent: block b handles rows b, b + gridDim.x, ... (grid = rows up to 2^31-1),
// TPR threads per row, x in registers (VPT float4 per thread), the weight read through
// L1 after the reduction (not held across rows), so few registers and many resident
// blocks: the hardware's block scheduler keeps the loads in flight.
template <int TPR, int VPT, int MINB>
__global__ void __launch_bounds__(TPR, MINB)
rms_row(const float* __restrict__ xf, const float* __restrict__ wf, float* __restrict__ yf,
        long long rows, int nv, float invN, float eps) {
  constexpr int NW = TPR / 32;
  static_assert(TPR % 32 == 0, "whole warps");
  __shared__ float red[2][NW];
  const float4* __restrict__ x = reinterpret_cast<const float4*>(xf);
  const float4* __restrict__ w = reinterpret_cast<const float4*>(wf);
  float4* __restrict__ y = reinterpret_cast<float4*>(yf);
  const int t = threadIdx.x;
  int it = 0;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x, ++it) {
    const float4* xr = x + (size_t)r * nv;
    float4 v[VPT];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = t + k * TPR;
      if (idx < nv) v[k] = ldx<0>(xr + idx); else zero(v[k]);
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) ss = sq_acc(v[k], ss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
    float* rd = red[it & 1];
    if ((t & 31) == 0) rd[t >> 5] = ss;
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NW; ++j) s += rd[j];
    const float rstd = rstd_of(s, invN, eps);
    float4* yr = y + (size_t)r * nv;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = t + k * TPR;
      if (idx < nv) yr[idx] = norm(v[k], rstd, __ldg(w + idx));
    }
  }
}

// ---------------------------------------------------------------- cp.async pipeline
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// Persistent, one row per block of TPR threads (rows r = blockIdx.x + i * gridDim.x),
// float4 only (nv <= TPR * VPT).  x goes through an S-stage ring in shared memory
// filled by cp.async (16 B per thread per slot, L1 bypassed): when the block starts on
// row i, rows i+1 .. i+S-1 are already requested, so S-1 rows per block stay in flight
// whatever ptxas does with the schedule (a wait_group cannot move above the commit
// before it).  Thread t only ever writes and reads its own slots
// buf[(stage * VPT + k) * TPR + t], so no barrier guards the ring: its own
// cp.async.wait_group makes its copies visible to it, and it refills a stage only in
// the iteration after it read it (in program order, with the reduction's barrier in
// between).  One commit group per row, empty groups past the last row keep the count
// uniform: before the wait of iteration i, groups 0 .. i+S-1 are committed, so
// wait_group(S-1) completes group i = row blockIdx.x + i * gridDim.x.
template <int TPR, int VPT, int S, int MINB>
__global__ void __launch_bounds__(TPR, MINB)
rms_pipe(const float* __restrict__ xf, const float* __restrict__ wf, float* __restrict__ yf,
         long long rows, int nv, float invN, float eps) {
  constexpr int NW = TPR / 32;
  static_assert(TPR % 32 == 0 && S >= 2, "whole warps, at least two stages");
  extern __shared__ float4 buf[];  // S * VPT * TPR
  __shared__ float red[2][NW];

  const float4* __restrict__ x = reinterpret_cast<const float4*>(xf);
  const float4* __restrict__ w = reinterpret_cast<const float4*>(wf);
  float4* __restrict__ y = reinterpret_cast<float4*>(yf);
  const int t = threadIdx.x;
  const long long G = gridDim.x;

  float4 wr[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int idx = t + k * TPR;
    if (idx < nv) wr[k] = __ldg(w + idx); else zero(wr[k]);
  }

  auto issue = [&](long long r, int stage) {
    if (r < rows) {
      const float4* src = x + (size_t)r * nv;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int idx = t + k * TPR;
        if (idx < nv) cp_async16(buf + (stage * VPT + k) * TPR + t, src + idx);
      }
    }
    cp_async_commit();
  };

  const long long r0 = blockIdx.x;
#pragma unroll
  for (int s = 0; s < S - 1; ++s) issue(r0 + s * G, s);

  int sc = 0;  // stage holding row r
  int it = 0;
  for (long long r = r0; r < rows; r += G, ++it) {
    int sn = sc + S - 1;
    if (sn >= S) sn -= S;
    issue(r + (long long)(S - 1) * G, sn);  // stage sn was read in the previous iteration
    cp_async_wait<S - 1>();

    float4 v[VPT];
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = t + k * TPR;
      if (idx < nv) v[k] = buf[(sc * VPT + k) * TPR + t]; else zero(v[k]);
      ss = sq_acc(v[k], ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(FULL, ss, o);
    float* rd = red[it & 1];
    if ((t & 31) == 0) rd[t >> 5] = ss;
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NW; ++j) s += rd[j];
    // red[it & 1] is rewritten in iteration it + 2, after the barrier of it + 1
    const float rstd = rstd_of(s, invN, eps);

    float4* yr = y + (size_t)r * nv;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = t + k * TPR;
      if (idx < nv) yr[idx] = norm(v[k], rstd, wr[k]);
    }
    sc = sc + 1 == S ? 0 : sc + 1;
  }
  cp_async_wait<0>();
}

// ---------------------------------------------------------------- general path
// Any row length: one block per row (grid-strided over rows), sum of squares in double,
// then a second read of the row to normalise.
template <int VEC, int T>
__global__ void __launch_bounds__(T)
rms_general(const float* __restrict__ xf, const float* __restrict__ wf, float* __restrict__ yf,
            long long rows, long long nv, float invN, float eps) {
  typedef typename VT<VEC>::type V;
  constexpr int NW = T / 32;
  __shared__ double red[NW];
  const V* __restrict__ x = reinterpret_cast<const V*>(xf);
  const V* __restrict__ w = reinterpret_cast<const V*>(wf);
  V* __restrict__ y = reinterpret_cast<V*>(yf);
  const int tid = threadIdx.x;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const V* xr = x + (size_t)r * nv;
    double acc = 0.0;
    for (long long i = tid; i < nv; i += T) acc = sq_acc_d(__ldg(xr + i), acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(FULL, acc, o);
    if ((tid & 31) == 0) red[tid >> 5] = acc;
    __syncthreads();
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < NW; ++j) s += red[j];
    __syncthreads();  // red is rewritten for the next row
    const float rstd = rstd_of((float)s, invN, eps);
    V* yr = y + (size_t)r * nv;
    for (long long i = tid; i < nv; i += T) sty<1>(yr + i, norm(ldx<1>(xr + i), rstd, __ldg(w + i)));
  }
}

// ---------------------------------------------------------------- host side
constexpr int MAXDEV = 64;

static int num_sms(int dev) {
  static int cache[MAXDEV] = {0};
  if (dev >= 0 && dev < MAXDEV && cache[dev] > 0) return cache[dev];
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    cudaGetLastError();
    n = 132;
  }
  if (dev >= 0 && dev < MAXDEV) cache[dev] = n;
  return n;
}

// persistent: grid = SMs x resident blocks per SM (balanced over the row groups);
// otherwise one row group per block.
template <int VEC, int TPR, int RPB, int VPT, int HINT, int MINB = 1, bool PF = true>
static int launch_tile(const float* x, const float* w, float* y, long long rows, long long N,
                       float eps, bool persistent, int dev, cudaStream_t stream) {
  constexpr int T = TPR * RPB;
  auto kern = rms_tile<VEC, TPR, RPB, VPT, HINT, MINB, PF>;
  const long long nv = N / VEC;
  const long long groups = (rows + RPB - 1) / RPB;
  long long grid = groups;
  if (persistent) {
    static int occ_cache[MAXDEV] = {0};
    int occ = (dev >= 0 && dev < MAXDEV) ? occ_cache[dev] : 0;
    if (occ <= 0) {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, T, 0) != cudaSuccess || occ <= 0) {
        cudaGetLastError();
        occ = 1;
      }
      if (dev >= 0 && dev < MAXDEV) occ_cache[dev] = occ;
    }
    const long long slots = (long long)num_sms(dev) * occ;
    if (grid > slots) {
      const long long per = (groups + slots - 1) / slots;  // row groups per block
      grid = (groups + per - 1) / per;
    }
  }
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;  // the kernel strides over the rest
  kern<<<(unsigned)grid, T, 0, stream>>>(x, w, y, rows, (int)nv, 1.0f / (float)N, eps);
  return (int)cudaGetLastError();
}

template <int TPR, int VPT, int S, int MINB>
static int launch_pipe(const float* x, const float* w, float* y, long long rows, long long N,
                       float eps, int dev, cudaStream_t stream) {
  auto kern = rms_pipe<TPR, VPT, S, MINB>;
  constexpr int smem = S * VPT * TPR * 16;
  static int occ_cache[MAXDEV] = {0};
  int occ = (dev >= 0 && dev < MAXDEV) ? occ_cache[dev] : 0;
  if (occ <= 0) {
    // once per device: allow the ring above 48 KB and prefer shared memory over L1
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return (int)e;
    cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    cudaGetLastError();
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, TPR, smem) != cudaSuccess || occ <= 0) {
      cudaGetLastError();
      occ = 1;
    }
    if (dev >= 0 && dev < MAXDEV) occ_cache[dev] = occ;
  }
  const long long slots = (long long)num_sms(dev) * occ;
  long long grid = rows;
  if (grid > slots) {
    const long long per = (rows + slots - 1) / slots;  // rows per block
    grid = (rows + per - 1) / per;
  }
  kern<<<(unsigned)grid, TPR, smem, stream>>>(x, w, y, rows, (int)(N / 4), 1.0f / (float)N, eps);
  return (int)cudaGetLastError();
}

template <int TPR, int VPT, int MINB>
static int launch_row(const float* x, const float* w, float* y, long long rows, long long N,
                      float eps, cudaStream_t stream) {
  const long long grid = rows < 0x7fffffffLL ? rows : 0x7fffffffLL;
  rms_row<TPR, VPT, MINB><<<(unsigned)grid, TPR, 0, stream>>>(x, w, y, rows, (int)(N / 4),
                                                             1.0f / (float)N, eps);
  return (int)cudaGetLastError();
}

template <int VEC, int T>
static int launch_general(const float* x, const float* w, float* y, long long rows, long long N,
                          float eps, int dev, cudaStream_t stream) {
  long long grid = rows;
  const long long cap = (long long)num_sms(dev) * 64;
  if (grid > cap) grid = cap;
  rms_general<VEC, T><<<(unsigned)grid, T, 0, stream>>>(x, w, y, rows, N / VEC, 1.0f / (float)N, eps);
  return (int)cudaGetLastError();
}

}  // namespace rmsk

const char* rms_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// Returns a cudaError_t code (0 = success).  The build's RMS_MODE (= mode) picks the
// configuration for 512 < N/4 <= 1024 (the problem's N = 4096):
//   0: rms_pipe, 256 threads per row, 4 float4 per thread, 3-stage cp.async ring
//      (48 KiB per block, 4 blocks per SM, 2 rows per block in flight)
//   1: rms_row, one row per block (grid = rows), weight through L1
//   2: rms_tile persistent, next row prefetched into registers
//   3: rms_pipe with a 4-stage ring (64 KiB per block, 3 blocks per SM)
//   4: rms_pipe, 128 threads per row, 8 float4 per thread, 3 stages
int rms_launch(const float* x, const float* w, float* y, long long rows, long long N, float eps,
               int mode, int dev, void* stream_ptr) {
  using namespace rmsk;
  (void)mode;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream_ptr);
  if (rows <= 0 || N <= 0) return 0;
  const bool aligned = N % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (aligned) {
    const long long nv = N / 4;
    if (nv <= 32) return launch_tile<4, 8, 32, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
    if (nv <= 128) return launch_tile<4, 32, 8, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
    if (nv <= 512) return launch_tile<4, 128, 2, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
    if (nv <= 1024) {
#if RMS_MODE == 1
      return launch_row<256, 4, 8>(x, w, y, rows, N, eps, s);
#elif RMS_MODE == 2
      return launch_tile<4, 256, 1, 4, 0, 4, true>(x, w, y, rows, N, eps, true, dev, s);
#elif RMS_MODE == 3
      return launch_pipe<256, 4, 4, 3>(x, w, y, rows, N, eps, dev, s);
#elif RMS_MODE == 4
      return launch_pipe<128, 8, 3, 4>(x, w, y, rows, N, eps, dev, s);
#else
      return launch_pipe<256, 4, 3, 4>(x, w, y, rows, N, eps, dev, s);
#endif
    }
    if (nv <= 2048) return launch_tile<4, 512, 1, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
    if (nv <= 4096) return launch_tile<4, 1024, 1, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
    return launch_general<4, 512>(x, w, y, rows, N, eps, dev, s);
  }
  if (N <= 32) return launch_tile<1, 8, 32, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
  if (N <= 128) return launch_tile<1, 32, 8, 4, 0>(x, w, y, rows, N, eps, true, dev, s);
  if (N <= 2048) return launch_tile<1, 128, 2, 16, 0>(x, w, y, rows, N, eps, true, dev, s);
  if (N <= 4096) return launch_tile<1, 256, 1, 16, 0>(x, w, y, rows, N, eps, true, dev, s);
  return launch_general<1, 512>(x, w, y, rows, N, eps, dev, s);
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

const char* rms_error_string(int code);
int rms_launch(const float* x, const float* w, float* y, long long rows, long long N, float eps,
               int mode, int dev, void* stream_ptr);

torch::Tensor rms_forward(torch::Tensor x, torch::Tensor weight, double eps, int64_t mode) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rmsnorm: CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32,
              "rmsnorm: float32 tensors expected");
  TORCH_CHECK(x.device() == weight.device(), "rmsnorm: x and weight on different devices");
  TORCH_CHECK(weight.dim() == 1, "rmsnorm: weight must be 1-D");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(0), "rmsnorm: last dim of x must equal weight size");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto y = torch::empty(xc.sizes(), xc.options());
  const long long N = wc.numel();
  const long long rows = N > 0 ? xc.numel() / N : 0;
  if (rows == 0 || N == 0) return y;
  const int dev = x.device().index();
  void* stream = (void*)c10::cuda::getCurrentCUDAStream(dev).stream();
  const int err = rms_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(),
                             rows, N, (float)eps, (int)mode, dev, stream);
  TORCH_CHECK(err == 0, "rmsnorm kernel launch failed: ", rms_error_string(err));
  return y;
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo", f"-DRMS_MODE={_MODE}"]
_NAME = "rmsnorm_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["rms_forward"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)


class ModelNew(nn.Module):
    """Drop-in for Model: RMSNorm over the last dimension with a learnable weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rms_forward(x, self.weight, float(self.eps), _MODE)
