"""Softmax over the last dimension, written for problems/softmax_long_rows.py.

Fast path (float32 rows whose length is a multiple of 4, 16-byte aligned, up to
8 * T * 32 elements per cluster of CTAs): a row is held in registers by C CTAs of T threads,
C * T * 8 float4 slots covering it.  Each thread loads its 8 float4 (32 floats) once, so x
is read from device memory once and y written once (1.07 GB for the problem's shape;
~0.37 ms at 2.9 TB/s).  Row max: per-thread, warp shuffles, one __syncthreads (every warp
then reduces the warps' values itself), then, if C > 1, the CTAs' maxima through
distributed shared memory after a cluster barrier.  The registers are replaced by
e = 2^((x - max) * log2 e) (ex2.approx; relative error < 2e-6 for every output above 1e-9),
the sum is reduced the same way, and y = e * (1 / sum) is stored with streaming stores.
Every CTA of a cluster reduces the peers' values in the same order, so all agree bit for
bit on max and sum.  Masked slots (rows shorter than the slots) hold -inf and add 0.
The default is T = 1024: the problem's 32768-float row is one CTA of 1024 threads
(64 registers each), one CTA per SM, no cluster barrier.  Measured on an H100 against the
other shapes of the same kernel (harness protocol, ms): T = 1024, C = 1: 0.442;
T = 256, C = 4: 0.516; T = 512, C = 2, T = 128, C = 8 and persistent clusters with L2
prefetch: in between or slower.

General path (any other length, unaligned pointers, or rows too long for the clusters):
online softmax in two passes over x.  Pass 1: per (row, 16384-element chunk) running
(max, sum of exp) with rescaling, merged across threads and warps; a per-row combine of
the chunks' partials gives (max, 1 / sum); pass 2 writes y = exp(x - max) / sum.  float4
accesses when the length is a multiple of 4 and the pointers are aligned, scalar ones
otherwise.

NaN or +inf in a row gives a row of NaN and a row of -inf gives NaN, as torch does.
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

namespace smk {

constexpr unsigned FULL = 0xffffffffu;
constexpr float LOG2E = 1.4426950408889634f;
constexpr int VPT = 8;          // float4 slots per thread in the fast path (32 floats)
constexpr int MAX_CLUSTER = 8;  // portable cluster size limit

// 2^a, relative error ~2^-22; ex2(-inf) = 0, results below 2^-126 flush to 0.
__device__ __forceinline__ float ex2(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}
// e^(x - m): the difference is rounded once (as torch does), then scaled by log2 e.
__device__ __forceinline__ float exp_sub(float x, float m) { return ex2((x - m) * LOG2E); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}

__device__ __forceinline__ float4 ld_stream(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}

template <typename P>
__device__ __forceinline__ P* opaque(P* p) {
  uint64_t u = reinterpret_cast<uint64_t>(p);
  asm("mov.b64 %0, %0;" : "+l"(u));
  return reinterpret_cast<P*>(u);
}

// ---------------------------------------------------------------- fast path
// Cluster q (blocks q*C .. q*C+C-1 of a 1-D grid) handles rows q, q + nclusters, ...
// CTA of cluster rank r owns float4 columns [start, start + nloc) of the row (a balanced
// split of N4 over C); thread t owns slots t + k*T, k < VPT, valid for k < kv.
// Shared slots: red_m/red_s hold the warps' values; part[0]/part[1] the CTA's max/sum
// that the peers read.  Reuse across rows is safe without extra barriers: a slot is
// rewritten only after a barrier that every reader of its previous value has reached.
template <int T>
__global__ void __launch_bounds__(T, 1024 / T)
sm_rows(const float4* __restrict__ x, float4* __restrict__ y, long long rows, int N4, int C,
        int pf) {
  constexpr int NW = T / 32;
  __shared__ float red_m[NW];
  __shared__ float red_s[NW];
  __shared__ float part[2];
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  cg::cluster_group cl = cg::this_cluster();
  const int rank = C > 1 ? (int)cl.block_rank() : 0;
  const long long ncl = (long long)(gridDim.x / (unsigned)C);
  const int base = N4 / C, rem = N4 % C;
  const int nloc = base + (rank < rem ? 1 : 0);
  const int start = rank * base + min(rank, rem);
  const int kv = (nloc - tid + T - 1) / T;  // numerator >= 0: tid <= T - 1
  const float NEG_INF = __int_as_float(0xff800000);

  for (long long row = (long long)(blockIdx.x / (unsigned)C); row < rows; row += ncl) {
    // this thread's first slot; the others are at constant offsets k*T from it (the
    // pointers go through opaque moves so the compiler keeps immediate offsets instead
    // of eight 64-bit induction variables across the row loop)
    const long long off = row * (long long)N4 + start + tid;
    const float4* xr = opaque(x + off);
    float4* yr = opaque(y + off);
    float4 v[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      v[k] = k < kv ? ld_stream(xr + k * T) : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    if (pf && tid == 0 && row + ncl < rows)
      prefetch_l2(x + (row + ncl) * (long long)N4 + start, (unsigned)nloc * 16u);

    // ---- row max
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < VPT; ++k) m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
    m = warp_max(m);
    if (lane == 0) red_m[w] = m;
    __syncthreads();
    m = warp_max(lane < NW ? red_m[lane] : NEG_INF);
    if (C > 1) {
      if (tid == 0) part[0] = m;
      cl.sync();
      // lanes >= C map rank 0 (always a valid rank) and discard what they read
      const float pm = *cl.map_shared_rank(&part[0], (unsigned)(lane < C ? lane : 0));
      m = warp_max(lane < C ? pm : NEG_INF);
    }

    // ---- e = exp(x - max) in place, row sum (masked slots: exp(-inf) = 0)
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      v[k].x = exp_sub(v[k].x, m);
      v[k].y = exp_sub(v[k].y, m);
      v[k].z = exp_sub(v[k].z, m);
      v[k].w = exp_sub(v[k].w, m);
      s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    s = warp_sum(s);
    if (lane == 0) red_s[w] = s;
    __syncthreads();
    s = warp_sum(lane < NW ? red_s[lane] : 0.f);
    if (C > 1) {
      if (tid == 0) part[1] = s;
      cl.sync();
      const float ps = *cl.map_shared_rank(&part[1], (unsigned)(lane < C ? lane : 0));
      s = warp_sum(lane < C ? ps : 0.f);
    }

    // ---- y = e / sum
    const float inv = 1.f / s;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (k < kv) {
        float4 r;
        r.x = v[k].x * inv; r.y = v[k].y * inv; r.z = v[k].z * inv; r.w = v[k].w * inv;
        __stcs(yr + k * T, r);
      }
    }
  }
  // peers may still be reading this CTA's part[1]: keep its shared memory until they are done
  if (C > 1) cl.sync();
}

// ---------------------------------------------------------------- general path
template <int VEC> struct VT;
template <> struct VT<4> { typedef float4 type; };
template <> struct VT<1> { typedef float type; };
__device__ __forceinline__ void to_arr(const float4& v, float* f) { f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w; }
__device__ __forceinline__ void to_arr(const float& v, float* f) { f[0] = v; }
__device__ __forceinline__ float4 ninf_v(float4*) {
  const float n = __int_as_float(0xff800000);
  return make_float4(n, n, n, n);
}
__device__ __forceinline__ float ninf_v(float*) { return __int_as_float(0xff800000); }
__device__ __forceinline__ float4 apply_v(float4 v, float m, float inv) {
  float4 o;
  o.x = exp_sub(v.x, m) * inv; o.y = exp_sub(v.y, m) * inv;
  o.z = exp_sub(v.z, m) * inv; o.w = exp_sub(v.w, m) * inv;
  return o;
}
__device__ __forceinline__ float apply_v(float v, float m, float inv) { return exp_sub(v, m) * inv; }

// (m, s) <- merge of (m, s) and (m2, s2); (-inf, 0) is the empty state and (-inf, NaN)
// a part that saw only NaN and -inf (the NaN is kept: torch's row is NaN then).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
  const float M = fmaxf(m, m2);
  if (M == __int_as_float(0xff800000)) { m = M; s = s + s2; return; }
  s = s * exp_sub(m, M) + s2 * exp_sub(m2, M);
  m = M;
}
__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(FULL, m, o);
    const float s2 = __shfl_xor_sync(FULL, s, o);
    merge_ms(m, s, m2, s2);
  }
}

// Pass 1: unit u = (row, chunk) -> part[u] = (max, sum exp(x - max)) of the chunk.
template <int T, int VEC, int U>
__global__ void __launch_bounds__(T)
sm_stats(const float* __restrict__ x, long long N, long long chunk, long long nchunks,
         long long units, float2* __restrict__ part) {
  typedef typename VT<VEC>::type V;
  constexpr int NW = T / 32;
  __shared__ float red_m[NW], red_s[NW];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (long long u = blockIdx.x; u < units; u += gridDim.x) {
    const long long row = u / nchunks, c = u % nchunks;
    const long long c0 = c * chunk;
    const long long nv = min(chunk, N - c0) / VEC;
    const V* xr = reinterpret_cast<const V*>(x + row * N + c0);
    float m = __int_as_float(0xff800000), s = 0.f;
    for (long long k0 = 0; k0 < nv; k0 += (long long)T * U) {
      V v[U];
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const long long idx = k0 + (long long)j * T + threadIdx.x;
        v[j] = idx < nv ? __ldg(xr + idx) : ninf_v((V*)nullptr);
      }
      float f[VEC * U];
#pragma unroll
      for (int j = 0; j < U; ++j) to_arr(v[j], f + VEC * j);
      float gm = f[0];
#pragma unroll
      for (int i = 1; i < VEC * U; ++i) gm = fmaxf(gm, f[i]);
      const float nm = fmaxf(m, gm);
      if (nm != __int_as_float(0xff800000)) {
        float gs = 0.f;
#pragma unroll
        for (int i = 0; i < VEC * U; ++i) gs += exp_sub(f[i], nm);
        s = s * exp_sub(m, nm) + gs;
        m = nm;
      } else {
        // only -inf and NaN so far (fmaxf skips NaN): carry any NaN into s
        float g = 0.f;
#pragma unroll
        for (int i = 0; i < VEC * U; ++i) g += f[i] == f[i] ? 0.f : f[i];
        s += g;
      }
    }
    warp_merge(m, s);
    if (lane == 0) { red_m[w] = m; red_s[w] = s; }
    __syncthreads();
    if (w == 0) {
      m = lane < NW ? red_m[lane] : __int_as_float(0xff800000);
      s = lane < NW ? red_s[lane] : 0.f;
      warp_merge(m, s);
      if (lane == 0) part[u] = make_float2(m, s);
    }
    __syncthreads();  // red_* are rewritten by the next unit
  }
}

// One warp per row: combine the row's chunk partials into (max, 1 / sum).
__global__ void sm_finalize(const float2* __restrict__ part, long long rows, long long nchunks,
                            float2* __restrict__ stat) {
  const long long wpb = blockDim.x / 32;
  const int lane = threadIdx.x & 31;
  for (long long row = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows;
       row += (long long)gridDim.x * wpb) {
    float m = __int_as_float(0xff800000), s = 0.f;
    for (long long j = lane; j < nchunks; j += 32) {
      const float2 p = part[row * nchunks + j];
      merge_ms(m, s, p.x, p.y);
    }
    warp_merge(m, s);
    if (lane == 0) stat[row] = make_float2(m, 1.f / s);
  }
}

// Pass 2: unit u = (row, column block of T*U vectors) -> y = exp(x - max) / sum.
template <int T, int VEC, int U>
__global__ void __launch_bounds__(T)
sm_apply(const float* __restrict__ x, float* __restrict__ y, long long N, long long ncol,
         long long units, const float2* __restrict__ stat) {
  typedef typename VT<VEC>::type V;
  for (long long u = blockIdx.x; u < units; u += gridDim.x) {
    const long long row = u / ncol, c = u % ncol;
    const long long c0 = c * (long long)T * U * VEC;
    const long long nv = min((long long)T * U * VEC, N - c0) / VEC;
    const float2 st = stat[row];
    const V* xr = reinterpret_cast<const V*>(x + row * N + c0);
    V* yr = reinterpret_cast<V*>(y + row * N + c0);
    V v[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long idx = (long long)j * T + threadIdx.x;
      if (idx < nv) v[j] = __ldcs(xr + idx);
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const long long idx = (long long)j * T + threadIdx.x;
      if (idx < nv) __stcs(yr + idx, apply_v(v[j], st.x, st.y));
    }
  }
}

// ---------------------------------------------------------------- host side
constexpr int GEN_T = 256;
constexpr long long GEN_CHUNK = 16384;  // elements per unit of pass 1 (multiple of 4)
constexpr long long GRID_CAP = 1LL << 30;
static inline long long lmin(long long a, long long b) { return a < b ? a : b; }

struct Plan {
  int fast;  // 1: cluster kernel
  int T, C;
};

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Fast-path shape: T from tpref upwards until the row fits in <= 8 CTAs; rows that fit
// one CTA of fewer threads get fewer threads (down to 128).
static Plan plan_for(const void* x, const void* y, long long N, int tpref, int force_general) {
  Plan p{0, 0, 0};
  if (force_general || N % 4 != 0 || !aligned16(x) || !aligned16(y)) return p;
  const long long N4 = N / 4;
  if (N4 < 1 || N4 > (1LL << 30)) return p;
  int T = tpref;
  if (T != 128 && T != 256 && T != 512 && T != 1024) T = 256;
  while (T <= 1024) {
    const long long C = (N4 + (long long)T * VPT - 1) / ((long long)T * VPT);
    if (C <= MAX_CLUSTER) {
      if (C == 1)
        while (T > 128 && N4 <= (long long)(T / 2) * VPT) T /= 2;
      p.fast = 1; p.T = T; p.C = (int)C;
      return p;
    }
    T *= 2;
  }
  return p;
}

template <int T>
static int launch_fast(const float* x, float* y, long long rows, long long N4, int C,
                       int persist, int pf, cudaStream_t stream) {
  auto kern = sm_rows<T>;
  long long ncl = rows;
  if (ncl > GRID_CAP / C) ncl = GRID_CAP / C;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(T, 1, 1);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.numAttrs = 0;
  if (C > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)C;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  if (persist) {
    long long maxcl = 0;
    if (C > 1) {
      cfg.gridDim = dim3((unsigned)C, 1, 1);
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, (void*)kern, &cfg) == cudaSuccess) maxcl = n;
      else cudaGetLastError();
    } else {
      int dev = 0, nsm = 0, per = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kern, T, 0) == cudaSuccess)
        maxcl = (long long)per * nsm;
      else cudaGetLastError();
    }
    if (maxcl > 0 && maxcl < ncl) ncl = maxcl;
  }
  cfg.gridDim = dim3((unsigned)(ncl * C), 1, 1);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  return (int)cudaLaunchKernelEx(&cfg, kern, x4, y4, rows, (int)N4, C, pf ? 1 : 0);
}

template <int VEC>
static int launch_general(const float* x, float* y, long long rows, long long N, void* ws,
                          cudaStream_t stream) {
  constexpr int SU = 16 / VEC;  // vectors per thread per step of pass 1
  constexpr int AU = 16 / VEC;  // vectors per thread in pass 2
  const long long nchunks = (N + GEN_CHUNK - 1) / GEN_CHUNK;
  const long long units1 = rows * nchunks;
  float2* part = reinterpret_cast<float2*>(ws);
  float2* stat = part + units1;
  sm_stats<GEN_T, VEC, SU><<<(unsigned)lmin(units1, GRID_CAP), GEN_T, 0, stream>>>(
      x, N, GEN_CHUNK, nchunks, units1, part);
  const long long fb = (rows + 7) / 8;
  sm_finalize<<<(unsigned)lmin(fb, GRID_CAP), 256, 0, stream>>>(part, rows, nchunks, stat);
  const long long cw = (long long)GEN_T * AU * VEC;
  const long long ncol = (N + cw - 1) / cw;
  const long long units2 = rows * ncol;
  sm_apply<GEN_T, VEC, AU><<<(unsigned)lmin(units2, GRID_CAP), GEN_T, 0, stream>>>(
      x, y, N, ncol, units2, stat);
  return (int)cudaGetLastError();
}

}  // namespace smk

// Bytes of per-call scratch the chosen path needs (0 for the fast path).
long long sm_scratch_bytes(const void* x, const void* y, long long rows, long long N,
                           int tpref, int force_general) {
  const smk::Plan p = smk::plan_for(x, y, N, tpref, force_general);
  if (p.fast) return 0;
  const long long nchunks = (N + smk::GEN_CHUNK - 1) / smk::GEN_CHUNK;
  return (rows * nchunks + rows) * (long long)sizeof(float2) + 16;
}

const char* sm_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// x, y: rows x N, contiguous.  tpref: preferred CTA size of the fast path (128..1024);
// persist: one wave of clusters looping over rows; pf: with persist, L2 prefetch of the
// next row; force_general: general path only.  Returns a cudaError_t code; *path: 0
// general, otherwise the fast path's cluster size.
int sm_launch(const float* x, float* y, long long rows, long long N, int tpref, int persist,
              int pf, int force_general, void* ws, void* stream_ptr, int* path) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  *path = 0;
  if (rows <= 0 || N <= 0) return 0;
  const smk::Plan p = smk::plan_for(x, y, N, tpref, force_general);
  if (p.fast) {
    *path = p.C;
    const long long N4 = N / 4;
    const int ppf = persist && pf;
    switch (p.T) {
      case 128: return smk::launch_fast<128>(x, y, rows, N4, p.C, persist, ppf, stream);
      case 256: return smk::launch_fast<256>(x, y, rows, N4, p.C, persist, ppf, stream);
      case 512: return smk::launch_fast<512>(x, y, rows, N4, p.C, persist, ppf, stream);
      default: return smk::launch_fast<1024>(x, y, rows, N4, p.C, persist, ppf, stream);
    }
  }
  const bool vec = N % 4 == 0 && smk::aligned16(x) && smk::aligned16(y);
  if (vec) return smk::launch_general<4>(x, y, rows, N, ws, stream);
  return smk::launch_general<1>(x, y, rows, N, ws, stream);
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

long long sm_scratch_bytes(const void* x, const void* y, long long rows, long long N,
                           int tpref, int force_general);
const char* sm_error_string(int code);
int sm_launch(const float* x, float* y, long long rows, long long N, int tpref, int persist,
              int pf, int force_general, void* ws, void* stream_ptr, int* path);

// Returns {y, path}: path 0 general, otherwise the fast path's cluster size.
std::vector<torch::Tensor> sm_forward_impl(torch::Tensor x, int64_t tpref, int64_t persist,
                                           int64_t pf, int64_t force_general) {
  TORCH_CHECK(x.is_cuda(), "softmax kernel: CUDA tensor expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softmax kernel: float32 tensor expected");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc, torch::MemoryFormat::Contiguous);
  const long long numel = xc.numel();
  const long long N = xc.dim() == 0 ? 1 : xc.size(-1);
  if (numel == 0 || N == 0) return {y, torch::zeros({1}, torch::kInt32)};
  const long long rows = numel / N;
  void* stream = (void*)c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const long long wsb = sm_scratch_bytes(xc.data_ptr<float>(), y.data_ptr<float>(), rows, N,
                                         (int)tpref, (int)force_general);
  torch::Tensor ws;
  void* wsp = nullptr;
  if (wsb > 0) {
    ws = torch::empty({(int64_t)wsb}, xc.options().dtype(torch::kUInt8));
    wsp = ws.data_ptr();
  }
  int path = 0;
  const int err = sm_launch(xc.data_ptr<float>(), y.data_ptr<float>(), rows, N, (int)tpref,
                            (int)persist, (int)pf, (int)force_general, wsp, stream, &path);
  TORCH_CHECK(err == 0, "softmax kernel launch failed: ", sm_error_string(err));
  return {y, torch::full({1}, path, torch::kInt32)};
}

torch::Tensor sm_forward(torch::Tensor x, int64_t tpref, int64_t persist, int64_t pf) {
  return sm_forward_impl(x, tpref, persist, pf, 0)[0];
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo"]
_NAME = "softmax_long_rows_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["sm_forward", "sm_forward_impl"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)

# Fast-path configuration: CTA size (cluster size = 32768 / (8 * 4 * T) for the problem's
# rows), persistent clusters, L2 prefetch of the next row (persistent only).
_THREADS = 1024
_PERSIST = 0
_PREFETCH = 0


class ModelNew(nn.Module):
    """Drop-in for Model: softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sm_forward(x, _THREADS, _PERSIST, _PREFETCH)
