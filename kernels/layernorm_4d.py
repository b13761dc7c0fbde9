"""LayerNorm over the trailing dimensions, written for problems/layernorm_4d.py.

Fast path (rows of 0.5 to ~4.3 M float32 that fit on chip, such as the problem's
(64, 256, 256) rows of 16 MiB): one persistent cooperative kernel, one block of 512
threads per SM.  Block b owns the same column slice of every row (~124 KiB of a row over
132 SMs) and keeps x of that slice in registers (16 float4 per thread) from its load until
the block writes y; gamma's slice and most of beta's stay in shared memory for the whole
launch.  Per row each block posts its slice's (mean, M2) tagged with a launch-unique
number; every block waits until all entries carry the row's tag, combines them in double
and writes its slice of y while loading its slice of the next row.  x is read from
device memory once, y written once, gamma and beta read once.  So that device memory
does not idle while the blocks wait for one another, each block asks L2 to prefetch half
its slice of the row after next once it has posted; gamma and beta arrive by cp.async
behind row 0's loads; y is stored with L2 evict-first, keeping what was prefetched.

General path (any other size, unaligned or odd sizes): per-chunk (mean, M2) partials,
a per-row combine in double, then a pass that normalises with gamma and beta held in
registers across rows; it reads x twice.

Statistics: exact two-pass within each thread's registers, Chan's parallel merge in
float within a block and in double across blocks; no sum-of-squares cancellation.
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <mutex>

namespace lnk {

constexpr unsigned FULL = 0xffffffffu;

// ---------------------------------------------------------------- statistics helpers
__device__ __forceinline__ void chan_merge(float& n, float& mean, float& m2,
                                           float nb, float meanb, float m2b) {
  if (nb == 0.f) return;
  const float nn = n + nb;
  const float delta = meanb - mean;
  const float f = nb / nn;
  mean = fmaf(delta, f, mean);
  m2 = m2 + m2b + delta * delta * n * f;
  n = nn;
}

__device__ __forceinline__ void warp_chan(float& n, float& mean, float& m2) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float nb = __shfl_xor_sync(FULL, n, o);
    const float mb = __shfl_xor_sync(FULL, mean, o);
    const float m2b = __shfl_xor_sync(FULL, m2, o);
    chan_merge(n, mean, m2, nb, mb, m2b);
  }
}

// Block-wide merge; the result is valid in warp 0.  red: 96 floats of shared memory,
// free for reuse once the caller has passed another __syncthreads.
template <int T>
__device__ __forceinline__ void block_chan(float& n, float& mean, float& m2, float* red) {
  constexpr int NW = T / 32;
  warp_chan(n, mean, m2);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) { red[w] = n; red[32 + w] = mean; red[64 + w] = m2; }
  __syncthreads();
  if (w == 0) {
    n = l < NW ? red[l] : 0.f;
    mean = l < NW ? red[32 + l] : 0.f;
    m2 = l < NW ? red[64 + l] : 0.f;
    warp_chan(n, mean, m2);
  }
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}

// Merge a group of K values (valid ones flagged) into a thread's running stats:
// exact two-pass over the registers, then Chan.
template <int K>
__device__ __forceinline__ void group_stats(const float (&v)[K], const bool (&ok)[K],
                                            float& n, float& mean, float& m2) {
  float c = 0.f, s = 0.f;
#pragma unroll
  for (int i = 0; i < K; ++i) if (ok[i]) { c += 1.f; s += v[i]; }
  if (c == 0.f) return;
  const float gm = s / c;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < K; ++i) if (ok[i]) { const float d = v[i] - gm; q = fmaf(d, d, q); }
  chan_merge(n, mean, m2, c, gm, q);
}

__device__ __forceinline__ float4 norm4(float4 v, float4 g, float4 b, float mean, float rstd) {
  float4 o;
  o.x = fmaf((v.x - mean) * rstd, g.x, b.x);
  o.y = fmaf((v.y - mean) * rstd, g.y, b.y);
  o.z = fmaf((v.z - mean) * rstd, g.z, b.z);
  o.w = fmaf((v.w - mean) * rstd, g.w, b.w);
  return o;
}
__device__ __forceinline__ float norm1(float v, float g, float b, float mean, float rstd) {
  return fmaf((v - mean) * rstd, g, b);
}

// ---------------------------------------------------------------- memory helpers
__device__ __forceinline__ float4 ld_stream(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
}
// y is never read again: L2 evicts its lines first, keeping the prefetched x and beta's tail
__device__ __forceinline__ void st_evict_first(float4* p, float4 v, uint64_t pol) {
  asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, %5;"
               :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(pol) : "memory");
}
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"((unsigned)__cvta_generic_to_shared(smem_dst)), "l"(src) : "memory");
}
// one 16-byte entry as two 64-bit words, each single-copy atomic (a torn pair shows as a
// mismatched tag in one half and is read again)
__device__ __forceinline__ void ld_relaxed2(const unsigned long long* p, unsigned long long& a,
                                            unsigned long long& b) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ void st_relaxed2(unsigned long long* p, unsigned long long a,
                                            unsigned long long b) {
  asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" :: "l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ unsigned long long tagged(float v, unsigned tag) {
  return ((unsigned long long)tag << 32) | (unsigned long long)__float_as_uint(v);
}

// ---------------------------------------------------------------- persistent kernel
// One block per SM, all co-resident (cooperative launch).  Block b owns float4 columns
// [start, start + nloc) of every row; thread t owns slots t + k*T (k < VPT) of that slice
// and keeps x there in registers from the load of row r+1 until it writes y of row r+1.
// gamma's slice and as much of beta's as fits live in shared memory for the whole launch;
// they arrive by cp.async behind row 0's loads and are waited for at their first use.
//
// Exchange of per-row statistics, instead of a counter barrier: block j writes its
// (mean, M2) for row r as one 16-byte entry of two 64-bit words, each carrying a 32-bit tag
// (base + r + 1, unique over launches: base is an epoch kept in the workspace, advanced by
// block 0 at its exit), into slot r & 1; every block polls all G entries until each tag
// matches, then combines them in double.
//
// While the blocks wait for one another, HBM would idle: each block has just posted row
// r+1 and asks L2 to prefetch the first PFR slots of its slice of row r+2, so the wait is
// spent fetching (on the H100, 8 of 16 slots measured best; more evicts what it fetched).
//
// ws layout: [0, 4) epoch; from byte 256: entries[2][G] of two u64 words.
template <int T, int VPT, int PFR>
__global__ void __launch_bounds__(T, 1)
ln_persistent(const float4* __restrict__ x, const float4* __restrict__ gam,
              const float4* __restrict__ bet, float4* __restrict__ y,
              int rows, int N4, int nsb, float eps, unsigned char* __restrict__ ws) {
  extern __shared__ float4 smem[];
  __shared__ float red[96];
  __shared__ float s_stat[2];
  __shared__ double s_red_d[3 * 8];

  const int G = gridDim.x;
  const int base_n = N4 / G, rem = N4 % G;
  const int bid = blockIdx.x, tid = threadIdx.x;
  const int nloc = base_n + (bid < rem ? 1 : 0);
  const int start = bid * base_n + min(bid, rem);
  const double ntot = 4.0 * (double)N4;
  float4* sg = smem;          // nloc entries
  float4* sb = smem + nloc;   // nsb entries (nsb <= nloc)
  unsigned* epoch = reinterpret_cast<unsigned*>(ws);
  unsigned long long* ent = reinterpret_cast<unsigned long long*>(ws + 256);
  const unsigned tag0 = *reinterpret_cast<volatile unsigned*>(epoch);
  // this thread's slots tid + k*T are valid for k < kv; beta's are in shared memory for k < kb
  const int kv = (nloc - tid + T - 1) / T;
  const int kb = (min(nsb, nloc) - tid + T - 1) / T;
  uint64_t evict_first;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(evict_first));

  float4 xr[VPT];
  auto post_stats = [&](int r) {
    // thread two-pass over its registers, block Chan merge, tagged post
    // invalid slots hold zeros, so they add nothing to the sum
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) s += (xr[k].x + xr[k].y) + (xr[k].z + xr[k].w);
    const float tn = 4.f * (float)max(kv, 0);
    float tmean = tn > 0.f ? s / tn : 0.f;
    float tm2 = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (k < kv) {
        const float a = xr[k].x - tmean, b = xr[k].y - tmean, c = xr[k].z - tmean, d = xr[k].w - tmean;
        tm2 = fmaf(a, a, fmaf(b, b, fmaf(c, c, fmaf(d, d, tm2))));
      }
    }
    float tnn = tn;
    block_chan<T>(tnn, tmean, tm2, red);
    if (tid == 0) {
      const unsigned tag = tag0 + (unsigned)r + 1u;
      st_relaxed2(ent + ((size_t)(r & 1) * G + bid) * 2, tagged(tmean, tag), tagged(tm2, tag));
    }
  };
  auto prefetch_l2 = [&](int r) {
    // one thread per 128-byte line of the first PFR slots
    if (r < rows) {
      const float4* p = x + (size_t)r * N4 + start;
#pragma unroll
      for (int k = 0; k < PFR; ++k) {
        const int idx = tid + k * T;
        if (k < kv && (((start + idx) & 7) == 0 || idx == 0))
          asm volatile("prefetch.global.L2 [%0];" :: "l"(p + idx));
      }
    }
  };

  // prologue: row 0's loads first, then the parameters behind them
  {
    const float4* xr0 = x + start;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = tid + k * T;
      xr[k] = k < kv ? ld_stream(xr0 + idx) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // each thread copies, and later reads, only its own slots: no block barrier needed
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = tid + k * T;
      if (k < kv) cp_async16(sg + idx, gam + start + idx);
      if (k < kb) cp_async16(sb + idx, bet + start + idx);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    post_stats(0);
    prefetch_l2(1);
  }

  for (int r = 0; r < rows; ++r) {
    // wait for all blocks' partials of row r: warp w polls entries w*32 + lane until
    // every tag matches, reduces them exactly in double (two-pass within the warp);
    // then thread 0 merges the warps' (n, mean, M2) with Chan's formula in double.
    {
      const int w = tid >> 5, lane = tid & 31;
      const int j = w * 32 + lane;
      if (w * 32 < G) {
        const unsigned tag = tag0 + (unsigned)r + 1u;
        const unsigned long long* e = ent + ((size_t)(r & 1) * G + j) * 2;
        unsigned long long a = 0, b = 0;
        if (j < G) {
          for (;;) {
            ld_relaxed2(e, a, b);
            if ((unsigned)(a >> 32) == tag && (unsigned)(b >> 32) == tag) break;
            __nanosleep(100);
          }
        }
        __syncwarp();
        const double nj = j < G ? 4.0 * (double)(base_n + (j < rem ? 1 : 0)) : 0.0;
        const double mj = (double)__uint_as_float((unsigned)a);
        const double m2j = (double)__uint_as_float((unsigned)b);
        const double nw = warp_sum_d(nj);
        const double mw = warp_sum_d(nj * mj) / nw;
        const double dj = mj - mw;
        const double qw = warp_sum_d(j < G ? m2j + nj * dj * dj : 0.0);
        if (lane == 0) { s_red_d[3 * w] = nw; s_red_d[3 * w + 1] = mw; s_red_d[3 * w + 2] = qw; }
      }
      __syncthreads();
      if (tid == 0) {
        const int nw = (G + 31) / 32;
        double sm = 0.0;
        for (int v = 0; v < nw; ++v) sm += s_red_d[3 * v] * s_red_d[3 * v + 1];
        const double mean = sm / ntot;
        double m2 = 0.0;
        for (int v = 0; v < nw; ++v) {
          const double d = s_red_d[3 * v + 1] - mean;
          m2 += s_red_d[3 * v + 2] + s_red_d[3 * v] * d * d;
        }
        s_stat[0] = (float)mean;
        s_stat[1] = (float)(1.0 / sqrt(m2 / ntot + (double)eps));
      }
    }
    __syncthreads();
    if (r == 0) asm volatile("cp.async.wait_all;" ::: "memory");
    const float mean = s_stat[0], rstd = s_stat[1];
    const bool has_next = r + 1 < rows;
    float4* yr = y + (size_t)r * N4 + start;
    const float4* xn = x + (size_t)(r + 1) * N4 + start;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int idx = tid + k * T;
      if (k < kv) {
        const float4 bv = k < kb ? sb[idx] : __ldg(bet + start + idx);
        st_evict_first(yr + idx, norm4(xr[k], sg[idx], bv, mean, rstd), evict_first);
        if (has_next) xr[k] = ld_stream(xn + idx);
      }
    }
    if (has_next) {
      post_stats(r + 1);
      prefetch_l2(r + 2);
    }
  }
  if (bid == 0 && tid == 0) *reinterpret_cast<volatile unsigned*>(epoch) = tag0 + (unsigned)rows;
}

// ---------------------------------------------------------------- general path
// VEC = 4: float4 access (N % 4 == 0, 16-byte aligned pointers); VEC = 1: scalars.
template <int VEC> struct VT;
template <> struct VT<4> { typedef float4 type; };
template <> struct VT<1> { typedef float type; };

__device__ __forceinline__ void to_arr(const float4& v, float* f) { f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w; }
__device__ __forceinline__ void to_arr(const float& v, float* f) { f[0] = v; }
__device__ __forceinline__ float4 norm_v(float4 v, float4 g, float4 b, float mean, float rstd) { return norm4(v, g, b, mean, rstd); }
__device__ __forceinline__ float norm_v(float v, float g, float b, float mean, float rstd) { return norm1(v, g, b, mean, rstd); }

// per (row, chunk) partial (mean, M2)
template <int T, int VEC, int U>
__global__ void __launch_bounds__(T)
ln_stats(const float* __restrict__ x, long long N, long long chunk, long long nchunks,
         double2* __restrict__ part) {
  typedef typename VT<VEC>::type V;
  __shared__ float red[96];
  const long long row = blockIdx.x / nchunks, c = blockIdx.x % nchunks;
  const long long c0 = c * chunk;
  const long long len = min(chunk, N - c0);
  const V* xr = reinterpret_cast<const V*>(x + row * N + c0);
  const long long nv = len / VEC;
  float tn = 0.f, tmean = 0.f, tm2 = 0.f;
  for (long long k0 = 0; k0 < nv; k0 += (long long)T * U) {
    V v[U];
    bool okv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long idx = k0 + (long long)u * T + threadIdx.x;
      okv[u] = idx < nv;
      if (okv[u]) v[u] = __ldg(xr + idx); else v[u] = V();
    }
    float f[VEC * U];
    bool ok[VEC * U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      to_arr(v[u], f + VEC * u);
#pragma unroll
      for (int e = 0; e < VEC; ++e) ok[VEC * u + e] = okv[u];
    }
    group_stats<VEC * U>(f, ok, tn, tmean, tm2);
  }
  block_chan<T>(tn, tmean, tm2, red);
  if (threadIdx.x == 0) part[blockIdx.x] = make_double2((double)tmean, (double)tm2);
}

// one warp per row: combine the row's chunk partials in double
__global__ void ln_finalize(const double2* __restrict__ part, long long rows, long long N,
                            long long chunk, long long nchunks, float eps,
                            float2* __restrict__ stat) {
  const long long row = (long long)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const double2* pr = part + row * nchunks;
  double s = 0.0;
  for (long long j = lane; j < nchunks; j += 32) {
    const double nj = (double)min(chunk, N - j * chunk);
    s += nj * pr[j].x;
  }
  const double mean = warp_sum_d(s) / (double)N;
  double q = 0.0;
  for (long long j = lane; j < nchunks; j += 32) {
    const double nj = (double)min(chunk, N - j * chunk);
    const double d = pr[j].x - mean;
    q += pr[j].y + nj * d * d;
  }
  const double var = warp_sum_d(q) / (double)N;
  if (lane == 0) stat[row] = make_float2((float)mean, (float)(1.0 / sqrt(var + (double)eps)));
}

// Block = (column chunk of T*U vectors, group of rows): gamma and beta of the chunk are
// loaded once into registers and reused for every row of the group.
template <int T, int VEC, int U>
__global__ void __launch_bounds__(T)
ln_apply(const float* __restrict__ x, const float* __restrict__ gam, const float* __restrict__ bet,
         float* __restrict__ y, long long rows, long long N, long long ncol, long long rows_per,
         const float2* __restrict__ stat) {
  typedef typename VT<VEC>::type V;
  const long long c = blockIdx.x % ncol, rg = blockIdx.x / ncol;
  const long long c0 = c * (long long)T * U * VEC;
  const long long nv = (min((long long)T * U * VEC, N - c0)) / VEC;
  const long long r0 = rg * rows_per, r1 = min(rows, r0 + rows_per);
  const V* g = reinterpret_cast<const V*>(gam + c0);
  const V* b = reinterpret_cast<const V*>(bet + c0);
  V gv[U], bv[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long idx = (long long)u * T + threadIdx.x;
    if (idx < nv) { gv[u] = __ldg(g + idx); bv[u] = __ldg(b + idx); }
  }
  for (long long r = r0; r < r1; ++r) {
    const float2 st = stat[r];
    const V* xr = reinterpret_cast<const V*>(x + r * N + c0);
    V* yr = reinterpret_cast<V*>(y + r * N + c0);
    V v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long idx = (long long)u * T + threadIdx.x;
      if (idx < nv) v[u] = __ldcs(xr + idx);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long idx = (long long)u * T + threadIdx.x;
      if (idx < nv) __stcs(yr + idx, norm_v(v[u], gv[u], bv[u], st.x, st.y));
    }
  }
}

// ---------------------------------------------------------------- host side
// float4 access needs rows of a multiple of 4 and 16-byte aligned pointers
static bool float4_ok(const float* x, const float* g, const float* b, const float* y, long long N) {
  return N % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(g) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
}
constexpr int GEN_T = 256;
constexpr long long GEN_CHUNK = 16384;  // elements per block in the statistics pass
constexpr int WS_HEAD = 256;

// Device attributes, queried once per device: on every call they would cost host time,
// which the caller sees as latency.
struct DevInfo { int nsm = 0, maxsmem = 0, coop = 0, smem_sm = 0; };
static DevInfo dev_info(int dev) {
  static std::mutex mu;
  static DevInfo info[64];
  static bool have[64] = {};
  std::lock_guard<std::mutex> lock(mu);
  DevInfo& d = info[dev & 63];
  if (!have[dev & 63]) {
    cudaDeviceGetAttribute(&d.nsm, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&d.maxsmem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaDeviceGetAttribute(&d.coop, cudaDevAttrCooperativeLaunch, dev);
    cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    have[dev & 63] = true;
  }
  return d;
}

// gamma's slice must fit in shared memory; beta's goes in as far as it fits and the rest
// is read through L2.  Returns a cudaError_t code; *taken tells whether it launched.
template <int T, int VPT, int PFR>
static int launch_persistent(const float* x, const float* g, const float* b, float* y,
                             long long rows, long long N, float eps, void* pws,
                             size_t pws_bytes, cudaStream_t stream, bool* taken) {
  *taken = false;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return (int)cudaGetLastError();
  if (dev < 0 || dev >= 64) return 0;
  const DevInfo di = dev_info(dev);
  if (!di.coop || di.nsm <= 0 || di.nsm > 256) return 0;
  const long long G = di.nsm;
  if (N % 4 != 0) return 0;
  const long long N4 = N / 4;
  const long long nloc_max = (N4 + G - 1) / G;
  // at least one vector per thread on average, at most VPT per thread
  if (N4 < G * T || nloc_max > (long long)T * VPT) return 0;
  if ((size_t)(WS_HEAD + 2 * G * 16) > pws_bytes) return 0;
  if (rows > (1LL << 30)) return 0;
  // dynamic shared memory: leave 2 KB for static shared memory and the 1 KB the system
  // reserves per block
  const long long avail = min((long long)di.maxsmem - 1024, (long long)di.smem_sm - 2048);
  if (nloc_max * 16 > avail) return 0;
  const long long nsb = min(nloc_max, (avail - nloc_max * 16) / 16);
  const size_t smem = (size_t)(nloc_max + nsb) * 16;
  auto kern = ln_persistent<T, VPT, PFR>;
  {
    // function attributes and the co-residency check, once per (kernel, device, size)
    static std::mutex mu;
    static size_t ready[64] = {};
    std::lock_guard<std::mutex> lock(mu);
    if (ready[dev] != smem) {
      cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      if (e != cudaSuccess) { cudaGetLastError(); return 0; }
      const int pct = (int)min(100LL, ((long long)smem + 2048) * 100 / di.smem_sm + 1);
      cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, pct);
      cudaGetLastError();
      int per_sm = 0;
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, T, smem);
      if (e != cudaSuccess || per_sm < 1) { cudaGetLastError(); return 0; }
      ready[dev] = smem;
    }
  }
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* g4 = reinterpret_cast<const float4*>(g);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  float4* y4 = reinterpret_cast<float4*>(y);
  int rows_i = (int)rows, n4_i = (int)N4, nsb_i = (int)nsb;
  unsigned char* ws = reinterpret_cast<unsigned char*>(pws);
  void* args[] = {(void*)&x4, (void*)&g4, (void*)&b4, (void*)&y4, (void*)&rows_i,
                  (void*)&n4_i, (void*)&nsb_i, (void*)&eps, (void*)&ws};
  *taken = true;
  return (int)cudaLaunchCooperativeKernel((const void*)kern, dim3((unsigned)G), dim3(T), args, smem, stream);
}

template <int VEC>
static int launch_general_v(const float* x, const float* g, const float* b, float* y,
                            long long rows, long long N, float eps, void* tws,
                            cudaStream_t stream) {
  constexpr int AU = 16 / VEC;  // vectors per thread in the apply pass
  int dev = 0, nsm = 132;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64 && dev_info(dev).nsm > 0) nsm = dev_info(dev).nsm;
  const long long nchunks = (N + GEN_CHUNK - 1) / GEN_CHUNK;
  const long long nblk = rows * nchunks;
  double2* part = reinterpret_cast<double2*>(tws);
  float2* stat = reinterpret_cast<float2*>(reinterpret_cast<char*>(tws) + nblk * sizeof(double2));
  ln_stats<GEN_T, VEC, 16 / VEC><<<(unsigned)nblk, GEN_T, 0, stream>>>(x, N, GEN_CHUNK, nchunks, part);
  ln_finalize<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(part, rows, N, GEN_CHUNK, nchunks, eps, stat);
  const long long cw = (long long)GEN_T * AU * VEC;
  const long long ncol = (N + cw - 1) / cw;
  long long groups = (8LL * nsm + ncol - 1) / ncol;
  if (groups > rows) groups = rows;
  if (groups < 1) groups = 1;
  const long long rows_per = (rows + groups - 1) / groups;
  groups = (rows + rows_per - 1) / rows_per;
  ln_apply<GEN_T, VEC, AU><<<(unsigned)(ncol * groups), GEN_T, 0, stream>>>(
      x, g, b, y, rows, N, ncol, rows_per, stat);
  return (int)cudaGetLastError();
}

}  // namespace lnk

// Bytes of per-call scratch the general path needs.
long long ln_scratch_bytes(long long rows, long long N) {
  const long long nchunks = (N + lnk::GEN_CHUNK - 1) / lnk::GEN_CHUNK;
  return rows * nchunks * (long long)sizeof(double2) + rows * (long long)sizeof(float2) + 16;
}

const char* ln_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// mode 0: automatic (the persistent kernel when the shape fits it, else the general path);
// 1: general path only; 2: the persistent kernel without its L2 prefetch (for
// benchmarking).  pws: zero-initialised scratch kept per stream (epoch and partials of
// the persistent kernel).  Returns a cudaError_t code (0 = success); *taken: whether the
// persistent kernel launched (else the caller runs ln_launch_general).
int ln_launch_persistent(const float* x, const float* g, const float* b, float* y, long long rows,
                         long long N, float eps, int mode, void* pws, long long pws_bytes,
                         void* stream_ptr, int* taken) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  *taken = 0;
  const bool aligned = lnk::float4_ok(x, g, b, y, N);
  if (rows <= 0 || N <= 0 || !aligned || mode == 1) return 0;
  bool t = false;
  const int err = mode == 2
      ? lnk::launch_persistent<512, 16, 0>(x, g, b, y, rows, N, eps, pws, (size_t)pws_bytes, stream, &t)
      : lnk::launch_persistent<512, 16, 8>(x, g, b, y, rows, N, eps, pws, (size_t)pws_bytes, stream, &t);
  *taken = t;
  return err;
}

// tws: per-call scratch of ln_scratch_bytes.
int ln_launch_general(const float* x, const float* g, const float* b, float* y, long long rows,
                      long long N, float eps, void* tws, void* stream_ptr) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  if (rows <= 0 || N <= 0) return 0;
  const bool aligned = lnk::float4_ok(x, g, b, y, N);
  if (aligned) return lnk::launch_general_v<4>(x, g, b, y, rows, N, eps, tws, stream);
  return lnk::launch_general_v<1>(x, g, b, y, rows, N, eps, tws, stream);
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <map>
#include <utility>

long long ln_scratch_bytes(long long rows, long long N);
const char* ln_error_string(int code);
int ln_launch_persistent(const float* x, const float* g, const float* b, float* y, long long rows,
                         long long N, float eps, int mode, void* pws, long long pws_bytes,
                         void* stream_ptr, int* taken);
int ln_launch_general(const float* x, const float* g, const float* b, float* y, long long rows,
                      long long N, float eps, void* tws, void* stream_ptr);

// Zero-initialised scratch for the persistent kernel's epoch and tagged partials, one per
// (device, stream), so launches on one stream (which run in order) share it safely.
static const int64_t kPersistBytes = 1 << 16;

static torch::Tensor& persist_ws(const torch::Device& dev, void* stream) {
  static auto* cache = new std::map<std::pair<int, void*>, torch::Tensor>();
  auto key = std::make_pair((int)dev.index(), stream);
  auto it = cache->find(key);
  if (it == cache->end()) {
    auto t = torch::zeros({kPersistBytes}, torch::TensorOptions().dtype(torch::kUInt8).device(dev));
    it = cache->emplace(key, t).first;
  }
  return it->second;
}

// y = layer_norm(x); *path: 1 when the persistent kernel ran, 0 for the general path.
static torch::Tensor ln_run(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps,
                            int mode, int* path) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layernorm: CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
              bias.scalar_type() == torch::kFloat32, "layernorm: float32 tensors expected");
  TORCH_CHECK(weight.sizes() == bias.sizes(), "layernorm: weight and bias shapes differ");
  const int64_t nd = weight.dim();
  TORCH_CHECK(x.dim() >= nd, "layernorm: input has fewer dims than normalized_shape");
  for (int64_t i = 0; i < nd; ++i)
    TORCH_CHECK(x.size(x.dim() - nd + i) == weight.size(i), "layernorm: trailing shape mismatch");
  TORCH_CHECK(x.device() == weight.device() && x.device() == bias.device(), "layernorm: devices differ");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const long long N = wc.numel();
  auto y = torch::empty_like(xc, torch::MemoryFormat::Contiguous);
  const long long rows = N > 0 ? xc.numel() / N : 0;
  *path = 0;
  if (rows == 0 || N == 0) return y;
  void* stream = (void*)c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const float *xp = xc.data_ptr<float>(), *wp = wc.data_ptr<float>(), *bp = bc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  int err = ln_launch_persistent(xp, wp, bp, yp, rows, N, (float)eps, mode,
                                 persist_ws(x.device(), stream).data_ptr(), kPersistBytes, stream, path);
  if (!*path && !err) {
    // scratch only for the general path: an allocation is host time on every call
    auto tws = torch::empty({(int64_t)ln_scratch_bytes(rows, N)}, xc.options().dtype(torch::kUInt8));
    err = ln_launch_general(xp, wp, bp, yp, rows, N, (float)eps, tws.data_ptr(), stream);
  }
  TORCH_CHECK(err == 0, "layernorm kernel launch failed: ", ln_error_string(err));
  return y;
}

torch::Tensor ln_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  int path = 0;
  return ln_run(x, weight, bias, eps, 0, &path);
}

// For benchmarks: a mode of ln_launch_persistent, and which path ran.
std::vector<torch::Tensor> ln_forward_impl(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                           double eps, int64_t mode) {
  int path = 0;
  auto y = ln_run(x, weight, bias, eps, (int)mode, &path);
  return {y, torch::full({1}, path, torch::kInt32)};
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo"]
_NAME = "layernorm_4d_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["ln_forward", "ln_forward_impl"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)


class ModelNew(nn.Module):
    """Drop-in for Model: LayerNorm over the trailing dims given by normalized_shape."""

    def __init__(self, normalized_shape: tuple, eps: float = 1e-5):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = float(eps)
        # same parameters, in the same order and shapes, as nn.LayerNorm's
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.ln_forward(x, self.weight, self.bias, self.eps)
