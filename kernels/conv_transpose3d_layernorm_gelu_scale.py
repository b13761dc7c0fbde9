"""ConvTranspose3d(k=4, s=2, p=1) + LayerNorm over W' + exact GELU + scale, written for
problems/conv_transpose3d_layernorm_gelu_scale.py.

Fast path (kernel 4, stride 2, padding 1, W = 32 so W' = 64, Cout = 64, Cin a multiple of
CT_CIC): ONE persistent kernel computes the transposed convolution in fp32 on the CUDA cores
and applies bias + LayerNorm + erf GELU + scale in its epilogue; the output is written to
HBM exactly once and nothing else is written.

  Parity decomposition: along each dim, output o = 2m + p takes exactly the two taps
  t in {0, 1}: input i = m + p - 1 + t with kernel index k = 3 - p - 2t (i checked
  against 0..n-1).  Along W both parities of a row use x[j-1], x[j], x[j+1]:
      out[2j] = x[j] w1 + x[j-1] w3,   out[2j+1] = x[j+1] w0 + x[j] w2.
  Winograd F(2,2) along W (CT_KIND 1, 2): for each pair of same-parity outputs, with
  d[j] = x[j-1] - x[j] (x[-1] = x[32] = 0):
      E1 += d[j] w3, E2 += x[j] (w3+w1), E3 += d[j+1] w1:   out[2j] = E1+E2, out[2j+2] = E2-E3
      O1 += d[j+1] w2, O2 += x[j+1] (w2+w0), O3 += d[j+2] w0: out[2j+1] = O1+O2, out[2j+3] = O2-O3
  i.e. 3 FFMA per 2 outputs per (ci, kd, kh) tap instead of 4 (all fp32; the transforms are
  single subtractions / additions, measured error no larger than the direct sum's).

  CT_KIND 2 (this file's default), convt_ln_wino2: 1 block of 256 threads per SM.
  Classes = (od parity, oh parity, co half); a block's weights for its class, [ci][kd][kh]
  [w3, w1, w3+w1, w2, w0, w2+w0][32 co] = 96 KiB, sit in shared memory (reloaded between
  two block barriers when the block's contiguous, class-major range of rows crosses into the
  next class: at most once or twice per launch).  Work unit = one output row (n, od, oh) of
  64 ow x 32 co, one warp per unit; lane = (jg 0..3, cg 0..7), thread tile = 16 ow x 4 co
  (96 Winograd accumulators).  Per (ci, kd, kh) step a thread loads x[j0..j0+7] and
  d[j0..j0+8] (5 LDS, broadcast over cg) and 6 x 4 weights (6 LDS.128, broadcast over jg)
  and issues 96 FFMA.  Each warp stages its own x rows (CIC ci x 2 kd x 2 kh rows of 32):
  LDG of the next chunk into registers during this chunk's math, then STS of x and d into
  the warp's buffer, with only __syncwarp, so warps never wait for each other inside the
  main loop.  Taps whose input plane / row is outside the input are skipped (warp-uniform).
  Epilogue: a row's 64 values for one co are in 4 lanes (16 each): two-pass mean/variance
  in registers + xor-shuffles, gamma/beta from shared memory, GELU (below), scale,
  float4 streaming stores.

  CT_KIND 1: the same Winograd math with 8-row tiles and block-wide double-buffered staging;
  CT_KIND 0: direct 4-tap math (128 FFMA per step), 2 blocks per SM, cp.async staging.

Traffic: x read about once (67 MB; the 8 classes sweep x in step) + output written once
(1.07 GB, ~0.4 ms of HBM time), hidden under the math: 51.5 G FFMA (the direct form would be
68.7 G).  ptxas: 221 registers, no spills, 136.5 KiB shared memory; instruction-issue
bound (~16.4 K instructions per warp and row, 124 rows per warp).

GELU (CT_FG 1): 1 + erf(z) = 2 - erfc(|z|) (z >= 0) or erfc(|z|) (z < 0), erfc(t) = 2^P(t)
with P a degree-9 minimax fit of log2(erfc) on [0, 4.5] and one ex2.approx: ~13
instructions instead of erff's ~21, ~500 fewer per row.  Max abs error against the exact
GELU 3.9e-7 in float32 emulation, the size of the erff formula's own rounding (4.5e-7).
Measured on an H100 (harness protocol, ms; eager 31.07, torch.compile 23.50): CT_KIND 2
with this GELU 3.742; with erff 4.267; CT_KIND 1 (CT_CIC 8, erff) 4.230;
CT_KIND 0 (CT_CIC 8, erff) 4.904; CT_KIND 2 with
CT_CIC 8 (erff) 5.193.

General path (any other kernel size / stride / padding / W / Cout, unaligned pointers):
a direct gather kernel for the transposed convolution (+ bias) into the output buffer,
then one warp per row for LayerNorm + GELU + scale in place (two-pass statistics).
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Which fast kernel the launcher uses: CT_KIND 0 = direct (convt_ln_fast), 1 = Winograd-W with
# block-wide staging (convt_ln_wino), 2 = Winograd-W with per-warp staging (convt_ln_wino2);
# CT_FG 1 = polynomial/ex2 GELU instead of erff; CT_CIC = input channels per staged chunk.
# Only the selected kernel is instantiated and compiled.
_CONFIG = "#define CT_KIND 2\n#define CT_FG 1\n#define CT_CIC 4\n"

_CUDA_SRC = _CONFIG + r"""
#include <cuda_runtime.h>
#include <stdint.h>

namespace ctk {

constexpr unsigned FULL = 0xffffffffu;
constexpr int XROW = 40;   // floats per staged x row: [3 pad][x(-1)=0][x0..x31][x(32)=0][3 pad]
constexpr int XOFF = 4;    // x[0] sits at offset 4 (16-byte aligned)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  const int sz = valid ? 16 : 0;   // 0: nothing is read, 16 zero bytes are written
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(sz) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ float gelu_scaled(float y, float scale) {
  return y * 0.5f * (1.f + erff(y * 0.70710678118654752440f)) * scale;
}

__device__ __forceinline__ float ex2_approx(float p) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(p));
  return r;
}
// GELU(y) * scale without erff's two-range selects: with z = y/sqrt(2) and
// erfc(t) = 2^P(t) for t = min(|z|, 4.5) (P: degree-9 weighted minimax fit of log2(erfc)
// on [0, 4.5], |2^P - erfc| < 3e-9), 1 + erf(z) = 2 - erfc(t) for z >= 0 and erfc(t) for
// z < 0.  Checked in float32 emulation against the exact GELU on [-12, 12]: max abs error
// 3.9e-7 (the same as the erff formula's own rounding, 4.5e-7).
__device__ __forceinline__ float gelu_scaled_fast(float y, float half_scale) {
  const float z = y * 0.70710678118654752440f;
  const float t = fminf(fabsf(z), 4.5f);
  float p = 1.1468702723504975e-05f;
  p = fmaf(p, t, -0.0001515653420938179f);
  p = fmaf(p, t, 0.0008423420367762446f);
  p = fmaf(p, t, -0.002261596964672208f);
  p = fmaf(p, t, 6.778563692932948e-05f);
  p = fmaf(p, t, 0.02773732878267765f);
  p = fmaf(p, t, -0.14831341803073883f);
  p = fmaf(p, t, -0.918441653251648f);
  p = fmaf(p, t, -1.627907395362854f);
  p = fmaf(p, t, 3.0963174246778635e-09f);
  const float e = ex2_approx(p);
  const float v = z >= 0.f ? 2.f - e : e;
  return (y * half_scale) * v;
}

template <bool FG>
__device__ __forceinline__ float gelu_out(float y, float scale, float half_scale) {
  if (FG) return gelu_scaled_fast(y, half_scale);
  return gelu_scaled(y, scale);
}

// One K-step (ci, td, th) of one thread: xr points at x[j0] of the staged row (j0 = 8*jg),
// wr at W_s[ci][td][th][kw = 0][4*cg].
__device__ __forceinline__ void kstep(float (&acc)[4][16], const float* xr, const float* wr) {
  float xv[10];   // xv[t] = x[j0 - 1 + t]
  xv[0] = xr[-1];
  const float4 xa = *reinterpret_cast<const float4*>(xr);
  const float4 xb = *reinterpret_cast<const float4*>(xr + 4);
  xv[9] = xr[8];
  xv[1] = xa.x; xv[2] = xa.y; xv[3] = xa.z; xv[4] = xa.w;
  xv[5] = xb.x; xv[6] = xb.y; xv[7] = xb.z; xv[8] = xb.w;
  const float4 q0 = *reinterpret_cast<const float4*>(wr);
  const float4 q1 = *reinterpret_cast<const float4*>(wr + 32);
  const float4 q2 = *reinterpret_cast<const float4*>(wr + 64);
  const float4 q3 = *reinterpret_cast<const float4*>(wr + 96);
  const float w0[4] = {q0.x, q0.y, q0.z, q0.w};
  const float w1[4] = {q1.x, q1.y, q1.z, q1.w};
  const float w2[4] = {q2.x, q2.y, q2.z, q2.w};
  const float w3[4] = {q3.x, q3.y, q3.z, q3.w};
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      // even output ow = 2j: x[j] * w[kw=1] + x[j-1] * w[kw=3]
      acc[c][2 * s] = fmaf(xv[s + 1], w1[c], acc[c][2 * s]);
      acc[c][2 * s] = fmaf(xv[s], w3[c], acc[c][2 * s]);
      // odd output ow = 2j+1: x[j+1] * w[kw=0] + x[j] * w[kw=2]
      acc[c][2 * s + 1] = fmaf(xv[s + 2], w0[c], acc[c][2 * s + 1]);
      acc[c][2 * s + 1] = fmaf(xv[s + 1], w2[c], acc[c][2 * s + 1]);
    }
  }
}

// ------------------------------------------------------------------ direct kernel (CT_KIND 0)
// Shared memory (dynamic, floats): W_s [Cin*512] | X_s [2][CIC*2*(NW+1)*XROW] | gamma [64] | beta [64]
template <int NW, int CIC, int MINB, bool FG>
__global__ void __launch_bounds__(NW * 32, MINB)
convt_ln_fast(const float* __restrict__ x, const float* __restrict__ wt,
              const float* __restrict__ cbias, const float* __restrict__ gam,
              const float* __restrict__ bet, float* __restrict__ out,
              int N, int Cin, int D, int H, int HG, int bpc, float eps, float scale) {
  constexpr int T = NW * 32;
  constexpr int RR = NW + 1;                      // ih rows per (ci, td)
  constexpr int XSTAGE = CIC * 2 * RR * XROW;     // floats per stage buffer
  constexpr int NSEG = CIC * 2 * RR * 8;          // 16-byte segments per stage
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Ws = smem;
  float* Xs = Ws + (size_t)Cin * 512;
  float* Gs = Xs + 2 * XSTAGE;
  float* Bs = Gs + 64;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int cls = blockIdx.x & 7;
  const int pd = cls & 1, ph = (cls >> 1) & 1, hco = cls >> 2;
  const int bi = blockIdx.x >> 3;
  const int upc = N * D * HG;                      // units per class
  if (bi >= upc) return;                           // block-uniform
  const int nmine = (upc - bi + bpc - 1) / bpc;   // units k = bi + i*bpc, i < nmine
  const int nch = Cin / CIC;
  const int Dout = 2 * D, Hout = 2 * H;
  const float half_scale = 0.5f * scale;

  // zero the staging buffers once: the halo slots x(-1), x(32) are never written again
  for (int i = tid; i < 2 * XSTAGE; i += T) Xs[i] = 0.f;
  if (tid < 64) { Gs[tid] = __ldg(gam + tid); Bs[tid] = __ldg(bet + tid); }
  __syncthreads();

  // unit k -> (n, a, g): od = 2a + pd, oh = 2(g*NW + warp) + ph
  auto coords = [&](int k, int& n, int& a, int& g) {
    g = k % HG;
    const int t2 = k / HG;
    a = t2 % D;
    n = t2 / D;
  };
  // stage the x patch of chunk q of unit (n, a, g) into buffer buf:
  // X_s[buf][(cil*2 + td)*RR + r][XOFF + iw] = x[n][q*CIC + cil][a+pd-1+td][g*NW+ph-1+r][iw] (0 outside)
  auto issue = [&](int buf, int n, int a, int g, int q) {
    const int id0 = a + pd - 1;
    const int ih0 = g * NW + ph - 1;
    float* dst = Xs + buf * XSTAGE + XOFF + (tid & 7) * 4;
    const float* xn = x + ((size_t)n * Cin + (size_t)q * CIC) * D * H * 32 + (tid & 7) * 4;
#pragma unroll
    for (int it = 0; it < (NSEG + T - 1) / T; ++it) {
      const int row = (tid >> 3) + it * (T / 8);
      if (NSEG % T == 0 || row < NSEG / 8) {
        const int r = row % RR, rest = row / RR;
        const int td = rest & 1, cil = rest >> 1;
        const int id = id0 + td, ih = ih0 + r;
        const bool ok = (unsigned)id < (unsigned)D && (unsigned)ih < (unsigned)H;
        const float* src = ok ? xn + (((size_t)cil * D + id) * H + ih) * 32 : x;
        cp_async16(dst + row * XROW, src, ok);
      }
    }
    cp_async_commit();
  };

  int cn, ca, cgp;
  coords(bi, cn, ca, cgp);
  issue(0, cn, ca, cgp, 0);

  // weights of this class: W_s[(((ci*2 + td)*2 + th)*4 + kw)*32 + co] = w[ci][hco*32+co][3-pd-2td][3-ph-2th][kw]
  {
    const int nv = Cin * 128;                      // float4 (kw 0..3) per (ci, co, td, th)
#pragma unroll 4
    for (int v = tid; v < nv; v += T) {
      const int co = v & 31, th = (v >> 5) & 1, td = (v >> 6) & 1, ci = v >> 7;
      const int kd = 3 - pd - 2 * td, kh = 3 - ph - 2 * th;
      const float4 wv = __ldg(reinterpret_cast<const float4*>(
          wt + ((((size_t)ci * 64 + hco * 32 + co) * 4 + kd) * 4 + kh) * 4));
      float* d = Ws + (((ci * 2 + td) * 2 + th) * 4) * 32 + co;
      d[0] = wv.x; d[32] = wv.y; d[64] = wv.z; d[96] = wv.w;
    }
  }

  const int jg = lane >> 3, cg = lane & 7;
  float acc[4][16];
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int o = 0; o < 16; ++o) acc[c][o] = 0.f;

  int s = 0;                                       // flat stage counter (buffer = s & 1)
  for (int i = 0; i < nmine; ++i) {
    const bool has_next = i + 1 < nmine;
    int nn = 0, na = 0, ng = 0;
    if (has_next) coords(bi + (i + 1) * bpc, nn, na, ng);
    const int m = cgp * NW + warp;                 // oh = 2m + ph
    const bool row_ok = m < H;                     // warp-uniform
    for (int q = 0; q < nch; ++q, ++s) {
      cp_async_wait_all();
      __syncthreads();                             // stage s visible; buffer (s+1)&1 free
      if (q + 1 < nch) issue((s + 1) & 1, cn, ca, cgp, q + 1);
      else if (has_next) issue((s + 1) & 1, nn, na, ng, 0);
      if (row_ok) {
        const float* xs = Xs + (s & 1) * XSTAGE + warp * XROW + XOFF + 8 * jg;
        const float* ws = Ws + (size_t)q * CIC * 512 + 4 * cg;
#pragma unroll
        for (int td = 0; td < 2; ++td) {
          const int id = ca + pd - 1 + td;
          if ((unsigned)id >= (unsigned)D) continue;   // block-uniform: the whole plane is padding
#pragma unroll
          for (int cil = 0; cil < CIC; ++cil) {
#pragma unroll
            for (int th = 0; th < 2; ++th) {
              kstep(acc, xs + ((cil * 2 + td) * RR + th) * XROW, ws + ((cil * 2 + td) * 2 + th) * 128);
            }
          }
        }
      }
    }
    if (row_ok) {
      // ---- epilogue: bias, LayerNorm over the 64 ow of each (co) row, GELU, scale
      const int od = 2 * ca + pd, oh = 2 * m + ph;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int co = hco * 32 + 4 * cg + c;
        const float cb = cbias != nullptr ? __ldg(cbias + co) : 0.f;
        float sum = 0.f;
#pragma unroll
        for (int o = 0; o < 16; ++o) { acc[c][o] += cb; sum += acc[c][o]; }
        sum += __shfl_xor_sync(FULL, sum, 8);
        sum += __shfl_xor_sync(FULL, sum, 16);
        const float mean = sum * (1.f / 64.f);
        float sq = 0.f;
#pragma unroll
        for (int o = 0; o < 16; ++o) { const float d = acc[c][o] - mean; sq = fmaf(d, d, sq); }
        sq += __shfl_xor_sync(FULL, sq, 8);
        sq += __shfl_xor_sync(FULL, sq, 16);
        const float rstd = 1.f / sqrtf(sq * (1.f / 64.f) + eps);
        float4* dst = reinterpret_cast<float4*>(
            out + ((((size_t)cn * 64 + co) * Dout + od) * Hout + oh) * 64 + 16 * jg);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float4 g4 = *reinterpret_cast<const float4*>(Gs + 16 * jg + 4 * u);
          const float4 b4 = *reinterpret_cast<const float4*>(Bs + 16 * jg + 4 * u);
          const float4 r = make_float4(
              gelu_out<FG>(fmaf((acc[c][4 * u + 0] - mean) * rstd, g4.x, b4.x), scale, half_scale),
              gelu_out<FG>(fmaf((acc[c][4 * u + 1] - mean) * rstd, g4.y, b4.y), scale, half_scale),
              gelu_out<FG>(fmaf((acc[c][4 * u + 2] - mean) * rstd, g4.z, b4.z), scale, half_scale),
              gelu_out<FG>(fmaf((acc[c][4 * u + 3] - mean) * rstd, g4.w, b4.w), scale, half_scale));
          __stcs(dst + u, r);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int o = 0; o < 16; ++o) acc[c][o] = 0.f;
    cn = nn; ca = na; cgp = ng;
  }
}

// ------------------------------------------------------------------ Winograd-W kernel
// Same parity decomposition and work units as convt_ln_fast, but along W each pair of
// same-parity outputs (2j, 2j+2) / (2j+1, 2j+3) is computed with Winograd F(2,2):
// 3 products per 2 outputs instead of 4 (96 FFMA per K-step instead of 128).
// With d[j] = x[j-1] - x[j] (j = 0..32, x[-1] = x[32] = 0), for a pair at j:
//   even: E1 += d[j] w3, E2 += x[j] (w3+w1), E3 += d[j+1] w1;  out[2j] = E1+E2, out[2j+2] = E2-E3
//   odd:  O1 += d[j+1] w2, O2 += x[j+1] (w2+w0), O3 += d[j+2] w0; out[2j+1] = O1+O2, out[2j+3] = O2-O3
// x rows are staged through registers (LDG of the next stage during this stage's math), and
// d is formed while storing them (one shuffle for the left neighbour).  1 block of 256
// threads per SM (96 accumulators per thread), units assigned in contiguous class-major
// ranges (weights reloaded when a block's class changes, at most a few times).
// Shared memory (floats): W_s [Cin*768] = [ci][td][th][6][co 32] (w3, w1, w3+w1, w2, w0, w2+w0)
//   | X_s [2][CIC*2*9*WXR] rows [3 pad][0][x0..x31][0][3 pad][3 pad][d0..d32][pad] | gamma | beta
constexpr int WXR = 80, WXO = 4, WDO = 44;

template <int CIC, bool FG>
__global__ void __launch_bounds__(256, 1)
convt_ln_wino(const float* __restrict__ x, const float* __restrict__ wt,
              const float* __restrict__ cbias, const float* __restrict__ gam,
              const float* __restrict__ bet, float* __restrict__ out,
              int N, int Cin, int D, int H, int HG, float eps, float scale) {
  constexpr int NW = 8, T = 256, RR = NW + 1;
  constexpr int NROWS = CIC * 2 * RR;
  constexpr int XSTAGE = NROWS * WXR;
  constexpr int NIT = (NROWS * 8 + T - 1) / T;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Ws = smem;
  float* Xs = Ws + (size_t)Cin * 768;
  float* Gs = Xs + 2 * XSTAGE;
  float* Bs = Gs + 64;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int upc = N * D * HG;
  const long long U = 8LL * upc;
  const int u0 = (int)((long long)blockIdx.x * U / gridDim.x);
  const int u1 = (int)((long long)(blockIdx.x + 1) * U / gridDim.x);
  if (u0 >= u1) return;                            // block-uniform
  const int nch = Cin / CIC;
  const int Dout = 2 * D, Hout = 2 * H;
  const float half_scale = 0.5f * scale;

  for (int i = tid; i < 2 * XSTAGE; i += T) Xs[i] = 0.f;
  if (tid < 64) { Gs[tid] = __ldg(gam + tid); Bs[tid] = __ldg(bet + tid); }

  // unit u -> class (pd, ph, hco) = u / upc, k = u % upc -> (n, a, g)
  struct Unit { int pd, ph, hco, n, a, g, cls; };
  auto decode = [&](int u) {
    Unit r;
    r.cls = u / upc;
    const int k = u - r.cls * upc;
    r.pd = r.cls & 1; r.ph = (r.cls >> 1) & 1; r.hco = r.cls >> 2;
    r.g = k % HG;
    const int t2 = k / HG;
    r.a = t2 % D; r.n = t2 / D;
    return r;
  };
  float4 sv[NIT];
  const int seg = tid & 7;
  auto load_stage = [&](const Unit& un, int q) {
    const int id0 = un.a + un.pd - 1, ih0 = un.g * NW + un.ph - 1;
    const float* xn = x + ((size_t)un.n * Cin + (size_t)q * CIC) * D * H * 32 + seg * 4;
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      const int row = (tid >> 3) + it * (T / 8);
      sv[it] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row < NROWS) {
        const int r = row % RR, rest = row / RR;
        const int td = rest & 1, cil = rest >> 1;
        const int id = id0 + td, ih = ih0 + r;
        if ((unsigned)id < (unsigned)D && (unsigned)ih < (unsigned)H)
          sv[it] = __ldg(reinterpret_cast<const float4*>(xn + (((size_t)cil * D + id) * H + ih) * 32));
      }
    }
  };
  auto store_stage = [&](int buf) {
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      const int row = (tid >> 3) + it * (T / 8);
      float prev = __shfl_up_sync(FULL, sv[it].w, 1);   // x[4*seg - 1] from the left segment
      if (seg == 0) prev = 0.f;
      if (row < NROWS) {
        float* rp = Xs + buf * XSTAGE + row * WXR;
        const float4 v = sv[it];
        *reinterpret_cast<float4*>(rp + WXO + 4 * seg) = v;
        *reinterpret_cast<float4*>(rp + WDO + 4 * seg) = make_float4(prev - v.x, v.x - v.y, v.y - v.z, v.z - v.w);
        if (seg == 7) rp[WDO + 32] = v.w;                // d[32] = x[31] - x[32] = x[31]
      }
    }
  };
  auto load_weights = [&](const Unit& un) {
    const int nv = Cin * 128;
#pragma unroll 4
    for (int v = tid; v < nv; v += T) {
      const int co = v & 31, th = (v >> 5) & 1, td = (v >> 6) & 1, ci = v >> 7;
      const int kd = 3 - un.pd - 2 * td, kh = 3 - un.ph - 2 * th;
      const float4 wv = __ldg(reinterpret_cast<const float4*>(
          wt + ((((size_t)ci * 64 + un.hco * 32 + co) * 4 + kd) * 4 + kh) * 4));
      float* d = Ws + (((ci * 2 + td) * 2 + th) * 6) * 32 + co;
      d[0] = wv.w;  d[32] = wv.y;  d[64] = wv.w + wv.y;
      d[96] = wv.z; d[128] = wv.x; d[160] = wv.z + wv.x;
    }
  };

  Unit cur = decode(u0);
  int wcls = cur.cls;
  __syncthreads();                                 // zeroed X_s before the first stores
  load_weights(cur);
  load_stage(cur, 0);
  store_stage(0);
  __syncthreads();

  const int jg = lane >> 3, cg = lane & 7;
  float acc[4][4][6];                              // [c][pair p][E1 E2 E3 O1 O2 O3]
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
      for (int e = 0; e < 6; ++e) acc[c][p][e] = 0.f;

  int s = 0;
  for (int u = u0; u < u1; ++u) {
    if (cur.cls != wcls) {                         // block-uniform; everyone is past the last sync
      load_weights(cur);
      wcls = cur.cls;
      __syncthreads();
    }
    const bool has_next = u + 1 < u1;
    const Unit nxt = has_next ? decode(u + 1) : cur;
    const int m = cur.g * NW + warp;
    const bool row_ok = m < H;
    for (int q = 0; q < nch; ++q, ++s) {
      const bool more = q + 1 < nch || has_next;
      if (q + 1 < nch) load_stage(cur, q + 1);
      else if (has_next) load_stage(nxt, 0);
      if (row_ok) {
        const float* xs = Xs + (s & 1) * XSTAGE + warp * WXR + 8 * jg;
        const float* ws = Ws + (size_t)q * CIC * 768 + 4 * cg;
#pragma unroll
        for (int td = 0; td < 2; ++td) {
          const int id = cur.a + cur.pd - 1 + td;
          if ((unsigned)id >= (unsigned)D) continue;     // block-uniform
#pragma unroll
          for (int cil = 0; cil < CIC; ++cil) {
#pragma unroll
            for (int th = 0; th < 2; ++th) {
              const float* rp = xs + ((cil * 2 + td) * RR + th) * WXR;
              const float* wp = ws + ((cil * 2 + td) * 2 + th) * 192;
              const float4 xa = *reinterpret_cast<const float4*>(rp + WXO);
              const float4 xb = *reinterpret_cast<const float4*>(rp + WXO + 4);
              const float4 da = *reinterpret_cast<const float4*>(rp + WDO);
              const float4 db = *reinterpret_cast<const float4*>(rp + WDO + 4);
              const float d8 = rp[WDO + 8];
              const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
              const float dv[9] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w, d8};
              const float4 q0 = *reinterpret_cast<const float4*>(wp);
              const float4 q1 = *reinterpret_cast<const float4*>(wp + 32);
              const float4 q2 = *reinterpret_cast<const float4*>(wp + 64);
              const float4 q3 = *reinterpret_cast<const float4*>(wp + 96);
              const float4 q4 = *reinterpret_cast<const float4*>(wp + 128);
              const float4 q5 = *reinterpret_cast<const float4*>(wp + 160);
              const float w3[4] = {q0.x, q0.y, q0.z, q0.w};
              const float w1[4] = {q1.x, q1.y, q1.z, q1.w};
              const float w31[4] = {q2.x, q2.y, q2.z, q2.w};
              const float w2[4] = {q3.x, q3.y, q3.z, q3.w};
              const float w0[4] = {q4.x, q4.y, q4.z, q4.w};
              const float w20[4] = {q5.x, q5.y, q5.z, q5.w};
#pragma unroll
              for (int c = 0; c < 4; ++c) {
#pragma unroll
                for (int p = 0; p < 4; ++p) {
                  acc[c][p][0] = fmaf(dv[2 * p], w3[c], acc[c][p][0]);
                  acc[c][p][1] = fmaf(xv[2 * p], w31[c], acc[c][p][1]);
                  acc[c][p][2] = fmaf(dv[2 * p + 1], w1[c], acc[c][p][2]);
                  acc[c][p][3] = fmaf(dv[2 * p + 1], w2[c], acc[c][p][3]);
                  acc[c][p][4] = fmaf(xv[2 * p + 1], w20[c], acc[c][p][4]);
                  acc[c][p][5] = fmaf(dv[2 * p + 2], w0[c], acc[c][p][5]);
                }
              }
            }
          }
        }
      }
      if (q == nch - 1 && row_ok) {
        const int od = 2 * cur.a + cur.pd, oh = 2 * m + cur.ph;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int co = cur.hco * 32 + 4 * cg + c;
          const float cb = cbias != nullptr ? __ldg(cbias + co) : 0.f;
          float v[16];
#pragma unroll
          for (int p = 0; p < 4; ++p) {
            v[4 * p + 0] = (acc[c][p][0] + acc[c][p][1]) + cb;   // ow = 16jg + 4p
            v[4 * p + 1] = (acc[c][p][3] + acc[c][p][4]) + cb;   // + 1
            v[4 * p + 2] = (acc[c][p][1] - acc[c][p][2]) + cb;   // + 2
            v[4 * p + 3] = (acc[c][p][4] - acc[c][p][5]) + cb;   // + 3
          }
          float sum = 0.f;
#pragma unroll
          for (int o = 0; o < 16; ++o) sum += v[o];
          sum += __shfl_xor_sync(FULL, sum, 8);
          sum += __shfl_xor_sync(FULL, sum, 16);
          const float mean = sum * (1.f / 64.f);
          float sq = 0.f;
#pragma unroll
          for (int o = 0; o < 16; ++o) { const float d = v[o] - mean; sq = fmaf(d, d, sq); }
          sq += __shfl_xor_sync(FULL, sq, 8);
          sq += __shfl_xor_sync(FULL, sq, 16);
          const float rstd = 1.f / sqrtf(sq * (1.f / 64.f) + eps);
          float4* dst = reinterpret_cast<float4*>(
              out + ((((size_t)cur.n * 64 + co) * Dout + od) * Hout + oh) * 64 + 16 * jg);
#pragma unroll
          for (int u4 = 0; u4 < 4; ++u4) {
            const float4 g4 = *reinterpret_cast<const float4*>(Gs + 16 * jg + 4 * u4);
            const float4 b4 = *reinterpret_cast<const float4*>(Bs + 16 * jg + 4 * u4);
            const float4 r = make_float4(
                gelu_out<FG>(fmaf((v[4 * u4 + 0] - mean) * rstd, g4.x, b4.x), scale, half_scale),
                gelu_out<FG>(fmaf((v[4 * u4 + 1] - mean) * rstd, g4.y, b4.y), scale, half_scale),
                gelu_out<FG>(fmaf((v[4 * u4 + 2] - mean) * rstd, g4.z, b4.z), scale, half_scale),
                gelu_out<FG>(fmaf((v[4 * u4 + 3] - mean) * rstd, g4.w, b4.w), scale, half_scale));
            __stcs(dst + u4, r);
          }
        }
      }
      if (q == nch - 1) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
          for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int e = 0; e < 6; ++e) acc[c][p][e] = 0.f;
      }
      if (more) store_stage((s + 1) & 1);          // buffer (s+1)&1 was last read before the previous sync
      __syncthreads();
    }
    cur = nxt;
  }
}

template <int CIC, bool FG>
static int launch_wino(const float* x, const float* w, const float* b, const float* g,
                       const float* be, float* y, long long N, long long Cin, long long D,
                       long long H, float eps, float scale, cudaStream_t stream, bool* taken) {
  *taken = false;
  if (Cin < CIC || Cin % CIC != 0) return 0;
  if (N <= 0 || D <= 0 || H <= 0) return 0;
  const long long HG = (H + 7) / 8;
  const long long upc = N * D * HG;
  if (8 * upc > (1LL << 30) || N * Cin * D * H * 32 > (1LL << 40)) return 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) { cudaGetLastError(); return 0; }
  int nsm = 0, maxsmem = 0;
  cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&maxsmem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  const long long smem = (Cin * 768 + 2LL * CIC * 2 * 9 * WXR + 128) * 4;
  if (nsm <= 0 || smem > maxsmem) return 0;
  auto kern = convt_ln_wino<CIC, FG>;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  cudaGetLastError();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, 256, (size_t)smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return 0;
  }
  long long grid = (long long)nsm * per_sm;
  if (grid > 8 * upc) grid = 8 * upc;
  *taken = true;
  kern<<<(unsigned)grid, 256, (size_t)smem, stream>>>(
      x, w, b, g, be, y, (int)N, (int)Cin, (int)D, (int)H, (int)HG, eps, scale);
  return (int)cudaGetLastError();
}

// ------------------------------------------------------------------ warp-independent Winograd-W kernel
// As convt_ln_wino (same Winograd pairs, same weight layout), but a work unit is ONE output
// row (n, od, oh) of a class and every warp runs its own units with its own x staging: a
// warp stages only the CIC x 2 (td) x 2 (th) rows it reads (LDG of the next chunk into
// registers during this chunk's math, stored into the warp's single buffer after it), so no
// block-wide barrier is needed inside the main loop (only __syncwarp), warps drift freely and
// one warp's epilogue or load stall overlaps the other warps' math.  Taps whose id or ih lies
// outside the input are skipped (warp-uniform).  A block's contiguous class-major unit range
// spans at most a couple of classes; at each class change the block reloads the weights
// between two block barriers.
// Shared memory (floats): W_s [Cin*768] | per warp [CIC*4 rows][WXR] | gamma | beta
template <int CIC, bool FG>
__global__ void __launch_bounds__(256, 1)
convt_ln_wino2(const float* __restrict__ x, const float* __restrict__ wt,
               const float* __restrict__ cbias, const float* __restrict__ gam,
               const float* __restrict__ bet, float* __restrict__ out,
               int N, int Cin, int D, int H, float eps, float scale) {
  constexpr int T = 256, NWARP = 8;
  constexpr int ROWS = CIC * 4;                    // rows (cil, td, th) per stage
  constexpr int WBUF = ROWS * WXR;                 // floats per warp buffer (one per warp)
  constexpr int NIT = ROWS * 8 / 32;               // float4 per lane per stage
  static_assert((ROWS * 8) % 32 == 0, "CIC must make whole warps of segments");
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Ws = smem;
  float* Xw = Ws + (size_t)Cin * 768;
  float* Gs = Xw + NWARP * WBUF;
  float* Bs = Gs + 64;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int upc = N * D * H;                       // units (rows) per class
  const long long U = 8LL * upc;
  const int u0 = (int)((long long)blockIdx.x * U / gridDim.x);
  const int u1 = (int)((long long)(blockIdx.x + 1) * U / gridDim.x);
  if (u0 >= u1) return;                            // block-uniform
  const int nch = Cin / CIC;
  const int Dout = 2 * D, Hout = 2 * H;
  const float half_scale = 0.5f * scale;

  for (int i = tid; i < NWARP * WBUF; i += T) Xw[i] = 0.f;
  if (tid < 64) { Gs[tid] = __ldg(gam + tid); Bs[tid] = __ldg(bet + tid); }
  float* xw = Xw + warp * WBUF;

  const int seg = lane & 7;
  // This lane stages segment seg of rows (lane >> 3) + 4*it, it < NIT, of every stage;
  // row = (cil*2 + td)*2 + th <- x[n][q*CIC + cil][a+pd-1+td][m+ph-1+th][4*seg .. 4*seg+3].
  // Offsets of those rows relative to x[n][q*CIC][a+pd-1][m+ph-1][0] and their (td, th)
  // bits are the same for every stage.  Rows whose id or ih lies outside the input are not
  // loaded: the compute skips exactly those (td, th) taps, so their stale contents are never read.
  int rel[NIT];
  unsigned tdbits = 0, thbits = 0;
#pragma unroll
  for (int it = 0; it < NIT; ++it) {
    const int row = (lane >> 3) + 4 * it;
    const int th = row & 1, td = (row >> 1) & 1, cil = row >> 2;
    rel[it] = ((cil * D + td) * H + th) * 32 + seg * 4;
    tdbits |= (unsigned)td << it;
    thbits |= (unsigned)th << it;
  }
  float4 sv[NIT];
#pragma unroll
  for (int it = 0; it < NIT; ++it) sv[it] = make_float4(0.f, 0.f, 0.f, 0.f);
  auto load_stage = [&](int n, int a, int m, int pd, int ph, int q) {
    const long long base = ((((long long)n * Cin + (long long)q * CIC) * D + (a + pd - 1)) * H + (m + ph - 1)) * 32;
    const bool tdv0 = (unsigned)(a + pd - 1) < (unsigned)D, tdv1 = (unsigned)(a + pd) < (unsigned)D;
    const bool thv0 = (unsigned)(m + ph - 1) < (unsigned)H, thv1 = (unsigned)(m + ph) < (unsigned)H;
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      const bool okd = ((tdbits >> it) & 1u) ? tdv1 : tdv0;
      const bool okh = ((thbits >> it) & 1u) ? thv1 : thv0;
      if (okd && okh) sv[it] = __ldg(reinterpret_cast<const float4*>(x + (base + rel[it])));
    }
  };
  auto store_stage = [&]() {
#pragma unroll
    for (int it = 0; it < NIT; ++it) {
      const int row = (lane >> 3) + 4 * it;
      float prev = __shfl_up_sync(FULL, sv[it].w, 1);   // x[4*seg - 1] from the left segment
      if (seg == 0) prev = 0.f;
      float* rp = xw + row * WXR;
      const float4 v = sv[it];
      *reinterpret_cast<float4*>(rp + WXO + 4 * seg) = v;
      *reinterpret_cast<float4*>(rp + WDO + 4 * seg) = make_float4(prev - v.x, v.x - v.y, v.y - v.z, v.z - v.w);
      if (seg == 7) rp[WDO + 32] = v.w;                  // d[32] = x[31] - x[32] = x[31]
    }
  };

  const int jg = lane >> 3, cg = lane & 7;
  float acc[4][4][6];                              // [c][pair p][E1 E2 E3 O1 O2 O3]
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int p = 0; p < 4; ++p)
#pragma unroll
      for (int e = 0; e < 6; ++e) acc[c][p][e] = 0.f;

  for (int sb = u0; sb < u1;) {
    const int cls = sb / upc;
    const int se = min(u1, (cls + 1) * upc);       // this class's part of the range
    const int pd = cls & 1, ph = (cls >> 1) & 1, hco = cls >> 2;
    __syncthreads();                               // previous weights no longer read; X_w zeroed
    {
      const int nv = Cin * 128;
#pragma unroll 4
      for (int v = tid; v < nv; v += T) {
        const int co = v & 31, th = (v >> 5) & 1, td = (v >> 6) & 1, ci = v >> 7;
        const int kd = 3 - pd - 2 * td, kh = 3 - ph - 2 * th;
        const float4 wv = __ldg(reinterpret_cast<const float4*>(
            wt + ((((size_t)ci * 64 + hco * 32 + co) * 4 + kd) * 4 + kh) * 4));
        float* d = Ws + (((ci * 2 + td) * 2 + th) * 6) * 32 + co;
        d[0] = wv.w;  d[32] = wv.y;  d[64] = wv.w + wv.y;
        d[96] = wv.z; d[128] = wv.x; d[160] = wv.z + wv.x;
      }
    }
    __syncthreads();
    const int base = cls * upc;
    int u = sb + warp;
    if (u < se) {                                  // warp-uniform from here on
      int k = u - base;
      int m = k % H, t2 = k / H;
      int a = t2 % D, n = t2 / D;
      load_stage(n, a, m, pd, ph, 0);
      store_stage();
      __syncwarp();
      while (true) {
        const int un = u + NWARP;
        const bool has_next = un < se;
        int nm = 0, na = 0, nn = 0;
        if (has_next) {
          const int kk = un - base;
          nm = kk % H;
          const int tt = kk / H;
          na = tt % D; nn = tt / D;
        }
        const bool tdv0 = (unsigned)(a + pd - 1) < (unsigned)D, tdv1 = (unsigned)(a + pd) < (unsigned)D;
        const bool thv0 = (unsigned)(m + ph - 1) < (unsigned)H, thv1 = (unsigned)(m + ph) < (unsigned)H;
        for (int q = 0; q < nch; ++q) {
          const bool more = q + 1 < nch || has_next;
          if (q + 1 < nch) load_stage(n, a, m, pd, ph, q + 1);
          else if (has_next) load_stage(nn, na, nm, pd, ph, 0);
          const float* xs = xw + 8 * jg;
          const float* ws = Ws + (size_t)q * CIC * 768 + 4 * cg;
#pragma unroll
          for (int td = 0; td < 2; ++td) {
            if (!(td ? tdv1 : tdv0)) continue;     // warp-uniform: the input plane is padding
#pragma unroll
            for (int th = 0; th < 2; ++th) {
              if (!(th ? thv1 : thv0)) continue;   // warp-uniform: the input row is padding
#pragma unroll
              for (int cil = 0; cil < CIC; ++cil) {
                const float* rp = xs + ((cil * 2 + td) * 2 + th) * WXR;
                const float* wp = ws + ((cil * 2 + td) * 2 + th) * 192;
                const float4 xa = *reinterpret_cast<const float4*>(rp + WXO);
                const float4 xb = *reinterpret_cast<const float4*>(rp + WXO + 4);
                const float4 da = *reinterpret_cast<const float4*>(rp + WDO);
                const float4 db = *reinterpret_cast<const float4*>(rp + WDO + 4);
                const float d8 = rp[WDO + 8];
                const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                const float dv[9] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w, d8};
                const float4 q0 = *reinterpret_cast<const float4*>(wp);
                const float4 q1 = *reinterpret_cast<const float4*>(wp + 32);
                const float4 q2 = *reinterpret_cast<const float4*>(wp + 64);
                const float4 q3 = *reinterpret_cast<const float4*>(wp + 96);
                const float4 q4 = *reinterpret_cast<const float4*>(wp + 128);
                const float4 q5 = *reinterpret_cast<const float4*>(wp + 160);
                const float w3[4] = {q0.x, q0.y, q0.z, q0.w};
                const float w1[4] = {q1.x, q1.y, q1.z, q1.w};
                const float w31[4] = {q2.x, q2.y, q2.z, q2.w};
                const float w2[4] = {q3.x, q3.y, q3.z, q3.w};
                const float w0[4] = {q4.x, q4.y, q4.z, q4.w};
                const float w20[4] = {q5.x, q5.y, q5.z, q5.w};
#pragma unroll
                for (int c = 0; c < 4; ++c) {
#pragma unroll
                  for (int p = 0; p < 4; ++p) {
                    acc[c][p][0] = fmaf(dv[2 * p], w3[c], acc[c][p][0]);
                    acc[c][p][1] = fmaf(xv[2 * p], w31[c], acc[c][p][1]);
                    acc[c][p][2] = fmaf(dv[2 * p + 1], w1[c], acc[c][p][2]);
                    acc[c][p][3] = fmaf(dv[2 * p + 1], w2[c], acc[c][p][3]);
                    acc[c][p][4] = fmaf(xv[2 * p + 1], w20[c], acc[c][p][4]);
                    acc[c][p][5] = fmaf(dv[2 * p + 2], w0[c], acc[c][p][5]);
                  }
                }
              }
            }
          }
          if (q == nch - 1) {
            const int od = 2 * a + pd, oh = 2 * m + ph;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int co = hco * 32 + 4 * cg + c;
              const float cb = cbias != nullptr ? __ldg(cbias + co) : 0.f;
              float v[16];
#pragma unroll
              for (int p = 0; p < 4; ++p) {
                v[4 * p + 0] = (acc[c][p][0] + acc[c][p][1]) + cb;   // ow = 16jg + 4p
                v[4 * p + 1] = (acc[c][p][3] + acc[c][p][4]) + cb;   // + 1
                v[4 * p + 2] = (acc[c][p][1] - acc[c][p][2]) + cb;   // + 2
                v[4 * p + 3] = (acc[c][p][4] - acc[c][p][5]) + cb;   // + 3
              }
              float sum = 0.f;
#pragma unroll
              for (int o = 0; o < 16; ++o) sum += v[o];
              sum += __shfl_xor_sync(FULL, sum, 8);
              sum += __shfl_xor_sync(FULL, sum, 16);
              const float mean = sum * (1.f / 64.f);
              float sq = 0.f;
#pragma unroll
              for (int o = 0; o < 16; ++o) { const float d = v[o] - mean; sq = fmaf(d, d, sq); }
              sq += __shfl_xor_sync(FULL, sq, 8);
              sq += __shfl_xor_sync(FULL, sq, 16);
              const float rstd = 1.f / sqrtf(sq * (1.f / 64.f) + eps);
              float4* dst = reinterpret_cast<float4*>(
                  out + ((((size_t)n * 64 + co) * Dout + od) * Hout + oh) * 64 + 16 * jg);
#pragma unroll
              for (int u4 = 0; u4 < 4; ++u4) {
                const float4 g4 = *reinterpret_cast<const float4*>(Gs + 16 * jg + 4 * u4);
                const float4 b4 = *reinterpret_cast<const float4*>(Bs + 16 * jg + 4 * u4);
                const float4 r = make_float4(
                    gelu_out<FG>(fmaf((v[4 * u4 + 0] - mean) * rstd, g4.x, b4.x), scale, half_scale),
                    gelu_out<FG>(fmaf((v[4 * u4 + 1] - mean) * rstd, g4.y, b4.y), scale, half_scale),
                    gelu_out<FG>(fmaf((v[4 * u4 + 2] - mean) * rstd, g4.z, b4.z), scale, half_scale),
                    gelu_out<FG>(fmaf((v[4 * u4 + 3] - mean) * rstd, g4.w, b4.w), scale, half_scale));
                __stcs(dst + u4, r);
              }
            }
#pragma unroll
            for (int c = 0; c < 4; ++c)
#pragma unroll
              for (int p = 0; p < 4; ++p)
#pragma unroll
                for (int e = 0; e < 6; ++e) acc[c][p][e] = 0.f;
          }
          __syncwarp();                            // every lane is done reading this chunk
          if (more) store_stage();                 // the next chunk, loaded during the math above
          __syncwarp();
        }
        if (!has_next) break;
        u = un; m = nm; a = na; n = nn;
      }
    }
    sb = se;
  }
}

template <int CIC, bool FG>
static int launch_wino2(const float* x, const float* w, const float* b, const float* g,
                        const float* be, float* y, long long N, long long Cin, long long D,
                        long long H, float eps, float scale, cudaStream_t stream, bool* taken) {
  *taken = false;
  if (Cin < CIC || Cin % CIC != 0) return 0;
  if (N <= 0 || D <= 0 || H <= 0) return 0;
  const long long upc = N * D * H;
  if (8 * upc > (1LL << 30) || Cin * D * H * 32 > (1LL << 30) || N * Cin * D * H * 32 > (1LL << 40)) return 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) { cudaGetLastError(); return 0; }
  int nsm = 0, maxsmem = 0;
  cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&maxsmem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  const long long smem = (Cin * 768 + 8LL * CIC * 4 * WXR + 128) * 4;
  if (nsm <= 0 || smem > maxsmem) return 0;
  auto kern = convt_ln_wino2<CIC, FG>;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  cudaGetLastError();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, 256, (size_t)smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return 0;
  }
  long long grid = (long long)nsm * per_sm;
  if (grid > (8 * upc + 7) / 8) grid = (8 * upc + 7) / 8;
  *taken = true;
  kern<<<(unsigned)grid, 256, (size_t)smem, stream>>>(
      x, w, b, g, be, y, (int)N, (int)Cin, (int)D, (int)H, eps, scale);
  return (int)cudaGetLastError();
}

// ------------------------------------------------------------------ general path
// Direct transposed convolution (groups 1, dilation 1, no output padding), + bias.
__global__ void convt_direct(const float* __restrict__ x, const float* __restrict__ w,
                             const float* __restrict__ b, float* __restrict__ y,
                             long long N, int Cin, int D, int H, int W, int Cout,
                             int Do, int Ho, int Wo, int kD, int kH, int kW,
                             int sD, int sH, int sW, int pD, int pH, int pW) {
  const long long total = N * Cout * (long long)Do * Ho * Wo;
  for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
       idx += (long long)gridDim.x * blockDim.x) {
    long long t = idx;
    const int ow = (int)(t % Wo); t /= Wo;
    const int oh = (int)(t % Ho); t /= Ho;
    const int od = (int)(t % Do); t /= Do;
    const int co = (int)(t % Cout);
    const long long n = t / Cout;
    float acc = b != nullptr ? b[co] : 0.f;
    for (int kd = 0; kd < kD; ++kd) {
      const int td = od + pD - kd;
      if (td < 0 || td % sD != 0) continue;
      const int id = td / sD;
      if (id >= D) continue;
      for (int kh = 0; kh < kH; ++kh) {
        const int th = oh + pH - kh;
        if (th < 0 || th % sH != 0) continue;
        const int ih = th / sH;
        if (ih >= H) continue;
        for (int kw = 0; kw < kW; ++kw) {
          const int tw = ow + pW - kw;
          if (tw < 0 || tw % sW != 0) continue;
          const int iw = tw / sW;
          if (iw >= W) continue;
          const float* xp = x + (((n * Cin) * D + id) * (long long)H + ih) * W + iw;
          const float* wp = w + (((long long)co * kD + kd) * kH + kh) * kW + kw;
          const long long xs = (long long)D * H * W;
          const long long wsz = (long long)Cout * kD * kH * kW;
          for (int ci = 0; ci < Cin; ++ci) acc = fmaf(xp[ci * xs], wp[ci * wsz], acc);
        }
      }
    }
    y[idx] = acc;
  }
}

// One warp per row of L values: two-pass LayerNorm, GELU, scale, in place.
__global__ void ln_gelu_rows(float* __restrict__ y, const float* __restrict__ g,
                             const float* __restrict__ b, long long rows, int L,
                             float eps, float scale) {
  const long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float* p = y + row * L;
  float s = 0.f;
  for (int i = lane; i < L; i += 32) s += p[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
  const float mean = s / (float)L;
  float q = 0.f;
  for (int i = lane; i < L; i += 32) { const float d = p[i] - mean; q = fmaf(d, d, q); }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(FULL, q, o);
  const float rstd = 1.f / sqrtf(q / (float)L + eps);
  for (int i = lane; i < L; i += 32) {
    const float v = fmaf((p[i] - mean) * rstd, g[i], b[i]);
    p[i] = gelu_scaled(v, scale);
  }
}

template <int NW, int CIC, int MINB, bool FG>
static int launch_fast(const float* x, const float* w, const float* b, const float* g,
                       const float* be, float* y, long long N, long long Cin, long long D,
                       long long H, float eps, float scale, cudaStream_t stream, bool* taken) {
  *taken = false;
  if (Cin < CIC || Cin % CIC != 0) return 0;
  if (N <= 0 || D <= 0 || H <= 0) return 0;
  const long long HG = (H + NW - 1) / NW;
  const long long upc = N * D * HG;
  if (upc > (1LL << 30) || N * Cin * D * H * 32 > (1LL << 40)) return 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) { cudaGetLastError(); return 0; }
  int nsm = 0, maxsmem = 0;
  cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&maxsmem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  const long long smem = (Cin * 512 + 2LL * CIC * 2 * (NW + 1) * XROW + 128) * 4;
  if (nsm <= 0 || smem > maxsmem) return 0;
  auto kern = convt_ln_fast<NW, CIC, MINB, FG>;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  cudaGetLastError();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NW * 32, (size_t)smem) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return 0;
  }
  long long bpc = (long long)nsm * per_sm / 8;
  if (bpc < 1) bpc = 1;
  if (bpc > upc) bpc = upc;
  *taken = true;
  kern<<<(unsigned)(8 * bpc), NW * 32, (size_t)smem, stream>>>(
      x, w, b, g, be, y, (int)N, (int)Cin, (int)D, (int)H, (int)HG, (int)bpc, eps, scale);
  return (int)cudaGetLastError();
}

}  // namespace ctk

const char* ct_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// mode 0: fast path where the shape allows it, else general; 1: general path only.
// Returns a cudaError_t code; *path: 1 fast, 0 general.
int ct_launch(const float* x, const float* w, const float* b, const float* g, const float* be,
              float* y, long long N, long long Cin, long long D, long long H, long long W,
              long long Cout, long long kD, long long kH, long long kW, long long sD,
              long long sH, long long sW, long long pD, long long pH, long long pW,
              long long Do, long long Ho, long long Wo, float eps, float scale, int mode,
              void* stream_ptr, int* path) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
  *path = 0;
  const long long total = N * Cout * Do * Ho * Wo;
  if (total <= 0) return 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(w) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(y) % 16 == 0);
  if (mode == 0 && aligned && kD == 4 && kH == 4 && kW == 4 && sD == 2 && sH == 2 && sW == 2 &&
      pD == 1 && pH == 1 && pW == 1 && W == 32 && Cout == 64 && Wo == 64) {
    bool taken = false;
#if CT_KIND == 2
    const int err = ctk::launch_wino2<CT_CIC, CT_FG != 0>(x, w, b, g, be, y, N, Cin, D, H, eps, scale, stream, &taken);
#elif CT_KIND == 1
    const int err = ctk::launch_wino<CT_CIC, CT_FG != 0>(x, w, b, g, be, y, N, Cin, D, H, eps, scale, stream, &taken);
#else
    const int err = ctk::launch_fast<8, CT_CIC, 2, CT_FG != 0>(x, w, b, g, be, y, N, Cin, D, H, eps, scale, stream, &taken);
#endif
    if (taken) { *path = 1; return err; }
    if (err) return err;
  }
  long long blocks = (total + 255) / 256;
  if (blocks > (1LL << 20)) blocks = 1LL << 20;
  ctk::convt_direct<<<(unsigned)blocks, 256, 0, stream>>>(
      x, w, b, y, N, (int)Cin, (int)D, (int)H, (int)W, (int)Cout, (int)Do, (int)Ho, (int)Wo,
      (int)kD, (int)kH, (int)kW, (int)sD, (int)sH, (int)sW, (int)pD, (int)pH, (int)pW);
  int err = (int)cudaGetLastError();
  if (err) return err;
  const long long rows = total / Wo;
  const long long lblocks = (rows * 32 + 255) / 256;
  ctk::ln_gelu_rows<<<(unsigned)lblocks, 256, 0, stream>>>(y, g, be, rows, (int)Wo, eps, scale);
  return (int)cudaGetLastError();
}
"""

_CPP_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <optional>
#include <vector>

const char* ct_error_string(int code);
int ct_launch(const float* x, const float* w, const float* b, const float* g, const float* be,
              float* y, long long N, long long Cin, long long D, long long H, long long W,
              long long Cout, long long kD, long long kH, long long kW, long long sD,
              long long sH, long long sW, long long pD, long long pH, long long pW,
              long long Do, long long Ho, long long Wo, float eps, float scale, int mode,
              void* stream_ptr, int* path);

static void check_f32_cuda(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda(), what, ": CUDA tensor expected");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, ": float32 expected");
}

std::vector<torch::Tensor> ct_forward_impl(torch::Tensor x, torch::Tensor weight,
                                           std::optional<torch::Tensor> bias, torch::Tensor ln_w,
                                           torch::Tensor ln_b, std::vector<int64_t> stride,
                                           std::vector<int64_t> padding, double eps, double scale,
                                           int64_t mode) {
  check_f32_cuda(x, "x");
  check_f32_cuda(weight, "conv weight");
  check_f32_cuda(ln_w, "layer_norm weight");
  check_f32_cuda(ln_b, "layer_norm bias");
  TORCH_CHECK(x.dim() == 5, "x: 5-d (N, C, D, H, W) expected");
  TORCH_CHECK(weight.dim() == 5, "conv weight: 5-d expected");
  TORCH_CHECK(stride.size() == 3 && padding.size() == 3, "stride and padding: 3 values expected");
  TORCH_CHECK(x.size(1) == weight.size(0), "x channels do not match the conv weight");
  c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto gc = ln_w.contiguous();
  auto bc = ln_b.contiguous();
  torch::Tensor cb;
  const float* cbp = nullptr;
  const int64_t Cout = wc.size(1);
  if (bias.has_value() && bias->defined()) {
    check_f32_cuda(*bias, "conv bias");
    cb = bias->contiguous();
    TORCH_CHECK(cb.numel() == Cout, "conv bias: out_channels values expected");
    cbp = cb.data_ptr<float>();
  }
  const int64_t N = xc.size(0), Cin = xc.size(1), D = xc.size(2), H = xc.size(3), W = xc.size(4);
  const int64_t kD = wc.size(2), kH = wc.size(3), kW = wc.size(4);
  const int64_t sD = stride[0], sH = stride[1], sW = stride[2];
  const int64_t pD = padding[0], pH = padding[1], pW = padding[2];
  TORCH_CHECK(sD > 0 && sH > 0 && sW > 0 && pD >= 0 && pH >= 0 && pW >= 0, "bad stride/padding");
  const int64_t Do = (D - 1) * sD - 2 * pD + kD;
  const int64_t Ho = (H - 1) * sH - 2 * pH + kH;
  const int64_t Wo = (W - 1) * sW - 2 * pW + kW;
  TORCH_CHECK(Do > 0 && Ho > 0 && Wo > 0, "empty output");
  TORCH_CHECK(gc.numel() == Wo && bc.numel() == Wo,
              "LayerNorm(normalized_shape) must match the output's last dimension");
  TORCH_CHECK(xc.device() == wc.device() && xc.device() == gc.device() && xc.device() == bc.device(),
              "all tensors must be on one device");
  auto y = torch::empty({N, Cout, Do, Ho, Wo}, xc.options());
  if (y.numel() == 0) return {y, torch::zeros({1}, torch::kInt32)};
  void* stream = (void*)c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  int path = 0;
  const int err = ct_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), cbp, gc.data_ptr<float>(),
                            bc.data_ptr<float>(), y.data_ptr<float>(), N, Cin, D, H, W, Cout, kD, kH,
                            kW, sD, sH, sW, pD, pH, pW, Do, Ho, Wo, (float)eps, (float)scale,
                            (int)mode, stream, &path);
  TORCH_CHECK(err == 0, "conv_transpose3d_layernorm_gelu kernel failed: ", ct_error_string(err));
  return {y, torch::full({1}, path, torch::kInt32)};
}

torch::Tensor ct_forward(torch::Tensor x, torch::Tensor weight, std::optional<torch::Tensor> bias,
                         torch::Tensor ln_w, torch::Tensor ln_b, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, double eps, double scale) {
  return ct_forward_impl(x, weight, bias, ln_w, ln_b, stride, padding, eps, scale, 0)[0];
}
"""

_CUDA_FLAGS = ["-O3", "-lineinfo"]
_NAME = "convt3d_ln_gelu_" + hashlib.sha256(
    (_CUDA_SRC + "\0" + _CPP_SRC + "\0" + " ".join(_CUDA_FLAGS)).encode()).hexdigest()[:16]

_ext = load_inline(
    name=_NAME,
    cpp_sources=[_CPP_SRC],
    cuda_sources=[_CUDA_SRC],
    functions=["ct_forward", "ct_forward_impl"],
    extra_cuda_cflags=_CUDA_FLAGS,
    no_implicit_headers=True,
    use_pch=True,
    verbose=False,
)


def _triple(v):
    if isinstance(v, (tuple, list)):
        assert len(v) == 3
        return [int(e) for e in v]
    return [int(v)] * 3


class ModelNew(nn.Module):
    """Drop-in for Model: the same parameters in the same order and shapes
    (conv weight (Cin, Cout, kD, kH, kW), conv bias (Cout,), LayerNorm weight, bias)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True,
                 eps=1e-5, scaling_factor=1.0):
        super().__init__()
        k = _triple(kernel_size)
        self.stride = _triple(stride)
        self.padding = _triple(padding)
        self.weight = nn.Parameter(torch.empty(in_channels, out_channels, *k))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.ln_weight = nn.Parameter(torch.ones(out_channels))
        self.ln_bias = nn.Parameter(torch.zeros(out_channels))
        self.eps = float(eps)
        self.scaling_factor = float(scaling_factor)
        # the default initialisation of a transposed convolution (fan_in from dim 1)
        fan_in = out_channels * k[0] * k[1] * k[2]
        bound = 1.0 / (fan_in ** 0.5)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.ct_forward(x, self.weight, self.bias, self.ln_weight, self.ln_bias,
                               self.stride, self.padding, self.eps, self.scaling_factor)
