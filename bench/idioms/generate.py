"""Four ways to build the same CUDA LayerNorm with load_inline, as candidate files
for problems/layernorm_4d.py.

Every file is made from one shared CUDA text (the kernels and an `extern "C"`
launcher that takes pointers, sizes and a stream) plus what the idiom puts
around it, so the idioms differ only in how they build and call it:

- seed:   `#include <torch/extension.h>` inside the .cu, the torch wrapper there
          too, `cpp_sources` holding only the prototype (the style of tests/seeds);
- quick:  raw CUDA in `cuda_sources`, the torch wrapper in `cpp_sources`,
          `no_implicit_headers=True`, `use_pch=True`;
- pybind: raw CUDA; `cpp_sources` includes only pybind11 and exposes the launcher
          taking integer pointers and the stream handle from Python; no torch headers;
- ctypes: raw CUDA built with `is_python_module=False` and loaded with ctypes.

    python bench/idioms/generate.py OUT_DIR [--threads 256]
"""
from __future__ import annotations

import argparse
from pathlib import Path

IDIOMS = ("seed", "quick", "pybind", "ctypes")
DEFAULT_THREADS = 256

# Statistics in double (sum and sum of squares, added across blocks with atomicAdd),
# then one elementwise pass with weight and bias. Correct, not tuned.
KERNELS = r"""
#include <cuda_runtime.h>
#include <cstdint>

static_assert(LN_THREADS % 32 == 0 && LN_THREADS <= 1024, "LN_THREADS: a multiple of 32, at most 1024");

__device__ __forceinline__ double ln_warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Block (chunk, row) adds its chunk's sum and sum of squares into ws[2 row], ws[2 row + 1].
__global__ void __launch_bounds__(LN_THREADS) ln_stats(const float* __restrict__ x, double* __restrict__ ws,
                                                       int64_t n, int64_t chunk) {
  const int64_t row = blockIdx.y;
  const int64_t begin = (int64_t)blockIdx.x * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  const float* xr = x + row * n;
  double s = 0.0, ss = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += LN_THREADS) {
    const double v = xr[i];
    s += v;
    ss += v * v;
  }
  __shared__ double part[2][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  s = ln_warp_sum(s);
  ss = ln_warp_sum(ss);
  if (lane == 0) { part[0][warp] = s; part[1][warp] = ss; }
  __syncthreads();
  if (warp == 0) {
    s = ln_warp_sum(lane < LN_THREADS / 32 ? part[0][lane] : 0.0);
    ss = ln_warp_sum(lane < LN_THREADS / 32 ? part[1][lane] : 0.0);
    if (lane == 0) {
      atomicAdd(ws + 2 * row, s);
      atomicAdd(ws + 2 * row + 1, ss);
    }
  }
}

// Turns each row's sums into (mean, 1 / sqrt(var + eps)), in place.
__global__ void ln_finalize(double* ws, int64_t rows, int64_t n, double eps) {
  const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const double mean = ws[2 * r] / n;
  const double var = fmax(ws[2 * r + 1] / n - mean * mean, 0.0);
  ws[2 * r] = mean;
  ws[2 * r + 1] = rsqrt(var + eps);
}

__global__ void __launch_bounds__(LN_THREADS) ln_apply(const float* __restrict__ x, const float* __restrict__ w,
                                                       const float* __restrict__ b, const double* __restrict__ ws,
                                                       float* __restrict__ y, int64_t n) {
  const int64_t row = blockIdx.y;
  const float mean = (float)ws[2 * row], rstd = (float)ws[2 * row + 1];
  const float* xr = x + row * n;
  float* yr = y + row * n;
  for (int64_t i = (int64_t)blockIdx.x * LN_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * LN_THREADS)
    yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

// x, y: rows x n floats; w, b: n floats; ws: 2 * rows doubles of scratch. Returns a cudaError_t.
extern "C" int ln_launch(const float* x, const float* w, const float* b, float* y, double* ws,
                         int64_t rows, int64_t n, double eps, cudaStream_t stream) {
  if (rows == 0 || n == 0) return 0;
  if (rows > 65535) return (int)cudaErrorInvalidConfiguration;  // one grid row per LayerNorm row
  cudaError_t err = cudaMemsetAsync(ws, 0, 2 * rows * sizeof(double), stream);
  if (err != cudaSuccess) return (int)err;
  const int64_t chunk = (int64_t)LN_THREADS * 16;
  ln_stats<<<dim3((unsigned)((n + chunk - 1) / chunk), (unsigned)rows), LN_THREADS, 0, stream>>>(x, ws, n, chunk);
  ln_finalize<<<(unsigned)((rows + 127) / 128), 128, 0, stream>>>(ws, rows, n, eps);
  const int64_t per_block = (int64_t)LN_THREADS * 8;
  int64_t blocks = (n + per_block - 1) / per_block;
  blocks = blocks < 65535 ? blocks : 65535;
  ln_apply<<<dim3((unsigned)blocks, (unsigned)rows), LN_THREADS, 0, stream>>>(x, w, b, ws, y, n);
  return (int)cudaGetLastError();
}

extern "C" const char* ln_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
"""

# The launcher's declarations, for a translation unit that does not define them.
LAUNCHER_DECLARATIONS = r"""
extern "C" int ln_launch(const float* x, const float* w, const float* b, float* y, double* ws,
                         int64_t rows, int64_t n, double eps, cudaStream_t stream);
extern "C" const char* ln_error_string(int code);
"""

TORCH_INCLUDES = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
"""

# The torch wrapper of the seed and quick idioms (inputs are checked in Python).
TORCH_WRAPPER = r"""
torch::Tensor ln_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
  auto y = torch::empty_like(x);
  const int64_t n = w.numel(), rows = x.numel() / n;
  auto ws = torch::empty({2 * rows}, x.options().dtype(torch::kFloat64));
  const int err = ln_launch(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
                            ws.data_ptr<double>(), rows, n, eps,
                            c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == 0, "ln_launch failed: ", ln_error_string(err));
  return y;
}
"""

PYBIND_SOURCE = r"""
#include <pybind11/pybind11.h>
#include <cstdint>
#include <cuda_runtime_api.h>
""" + LAUNCHER_DECLARATIONS + r"""
// Pointers and the stream come from Python as integers (Tensor.data_ptr(), Stream.cuda_stream).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("ln_launch", [](std::uintptr_t x, std::uintptr_t w, std::uintptr_t b, std::uintptr_t y,
                        std::uintptr_t ws, std::int64_t rows, std::int64_t n, double eps, std::uintptr_t stream) {
    return ln_launch(reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(w),
                     reinterpret_cast<const float*>(b), reinterpret_cast<float*>(y),
                     reinterpret_cast<double*>(ws), rows, n, eps, reinterpret_cast<cudaStream_t>(stream));
  });
  m.def("ln_error_string", [](int code) { return std::string(ln_error_string(code)); });
}
"""

HEADER = '''"""LayerNorm over the trailing dims (problems/layernorm_4d.py), {title}.

Generated by bench/idioms/generate.py ({idiom} idiom, {threads} threads per block)."""
{imports}
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#define LN_THREADS {threads}
{cuda}"""
'''

BUILD = {
    "seed": '''
CPP_SOURCE = "torch::Tensor ln_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

_ext = load_inline(name="{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["ln_forward"])


def layer_norm(x, w, b, eps):
    return _ext.ln_forward(x, w, b, eps)
''',
    "quick": '''
CPP_SOURCE = r"""{torch_includes}{declarations}{wrapper}"""

_ext = load_inline(name="{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["ln_forward"],
                   no_implicit_headers=True, use_pch=True)


def layer_norm(x, w, b, eps):
    return _ext.ln_forward(x, w, b, eps)
''',
    "pybind": '''
CPP_SOURCE = r"""{pybind}"""

_ext = load_inline(name="{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, no_implicit_headers=True)


def layer_norm(x, w, b, eps):
    y = torch.empty_like(x)
    ws = torch.empty(2 * (x.numel() // w.numel()), dtype=torch.float64, device=x.device)
    err = _ext.ln_launch(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr(),
                         ws.numel() // 2, w.numel(), eps, torch.cuda.current_stream(x.device).cuda_stream)
    if err:
        raise RuntimeError(f"ln_launch failed: {{_ext.ln_error_string(err)}}")
    return y
''',
    "ctypes": '''
CPP_SOURCE = "// No host wrapper: Python loads the library with ctypes."

_path = load_inline(name="{name}", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, is_python_module=False,
                    no_implicit_headers=True)
_lib = ctypes.CDLL(_path)
_lib.ln_launch.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64, ctypes.c_int64, ctypes.c_double,
                                                    ctypes.c_void_p]
_lib.ln_launch.restype = ctypes.c_int
_lib.ln_error_string.argtypes = [ctypes.c_int]
_lib.ln_error_string.restype = ctypes.c_char_p


def layer_norm(x, w, b, eps):
    y = torch.empty_like(x)
    ws = torch.empty(2 * (x.numel() // w.numel()), dtype=torch.float64, device=x.device)
    err = _lib.ln_launch(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr(),
                         ws.numel() // 2, w.numel(), eps, torch.cuda.current_stream(x.device).cuda_stream)
    if err:
        raise RuntimeError(f"ln_launch failed: {{_lib.ln_error_string(err).decode()}}")
    return y
''',
}

TITLES = {
    "seed": "torch headers inside the .cu",
    "quick": "raw CUDA plus a torch wrapper built with the precompiled header",
    "pybind": "raw CUDA plus a pybind11-only wrapper, no torch headers",
    "ctypes": "raw CUDA loaded with ctypes, no wrapper at all",
}

MODEL = '''

class ModelNew(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = shape
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        tail = tuple(x.shape[x.dim() - len(self.normalized_shape):])
        if not x.is_cuda or x.dtype != torch.float32 or tail != self.normalized_shape:
            raise ValueError(f"expected a CUDA float32 tensor ending in {self.normalized_shape}, "
                             f"got {x.dtype} {tuple(x.shape)} on {x.device}")
        return layer_norm(x.contiguous(), self.weight.contiguous(), self.bias.contiguous(), self.eps)
'''


def candidate_source(idiom: str, threads: int = DEFAULT_THREADS) -> str:
    """The candidate file for one idiom; `threads` (per block) makes otherwise equal sources differ."""
    if idiom not in IDIOMS:
        raise ValueError(f"unknown idiom {idiom!r}; choose from {', '.join(IDIOMS)}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads per block must be a multiple of 32 between 32 and 1024, got {threads}")
    imports = "import ctypes\n\nimport torch\nimport torch.nn as nn" if idiom == "ctypes" else \
        "import torch\nimport torch.nn as nn"
    # the seed idiom keeps everything, torch wrapper included, in the .cu
    cuda = TORCH_INCLUDES + KERNELS + TORCH_WRAPPER if idiom == "seed" else KERNELS
    header = HEADER.format(title=TITLES[idiom], idiom=idiom, threads=threads, imports=imports, cuda=cuda)
    build = BUILD[idiom].format(name=f"ln_{idiom}_t{threads}", torch_includes=TORCH_INCLUDES,
                                declarations=LAUNCHER_DECLARATIONS, wrapper=TORCH_WRAPPER,
                                pybind=PYBIND_SOURCE)
    return header + build + MODEL


def cuda_source(threads: int = DEFAULT_THREADS) -> str:
    """The raw CUDA text the quick, pybind and ctypes idioms compile, as nvcc sees it."""
    return f"#define LN_THREADS {threads}\n{KERNELS}"


def write_idioms(out_dir: Path, threads: int = DEFAULT_THREADS) -> dict[str, Path]:
    """One candidate file per idiom, named after it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for idiom in IDIOMS:
        paths[idiom] = out_dir / f"{idiom}.py"
        paths[idiom].write_text(candidate_source(idiom, threads))
    return paths


def write_quick_variants(out_dir: Path, threads: list[int]) -> list[Path]:
    """Quick-idiom candidates that differ only in threads per block: one cache entry each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in threads:
        path = out_dir / f"quick_t{t}.py"
        path.write_text(candidate_source("quick", t))
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="threads per block")
    args = parser.parse_args()
    for idiom, path in write_idioms(args.out_dir, args.threads).items():
        print(f"{idiom:7s} {path}")


if __name__ == "__main__":
    main()
