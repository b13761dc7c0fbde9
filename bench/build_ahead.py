"""N KernelBench-style candidates through `harness sweep`: wall time, verdicts and seconds by phase.

    PYTHONPATH=$PWD python bench/build_ahead.py KERNELBENCH_DIR [-n 50] [--out DIR] [--jobs N]
                                                [--gpus 0,1] [--time-cap 2] [--keep-cache]

The candidates are written as language models write them for KernelBench's leaderboard:
`#include <torch/extension.h>` inside `cuda_sources`, the torch wrapper in the .cu, a
prototype in `cpp_sources`, `verbose=True`, one plain kernel: elementwise for the level 1
activations, a reduction (atomicAdd of per-block sums in double) for MSELoss. About one in five is
wrong on purpose (a constant off), so the verdicts are not all `correct`: wrong where the problems'
inputs lie, torch.rand's [0, 1) for the activations (`v > 0 ? v : -v` is a ReLU there); every
file differs (block size, sample number), so no two share a build. They go under
OUT/candidates/level1/<problem id>/sample_<k>.py, the problems are read where they are.

The sweep runs on an empty build cache (OUT/cache) unless --keep-cache, as a fresh batch of
model output would. Printed: the wall time, verdicts, and per phase (build, start, check,
time, shapes) the sum, mean and largest seconds, from OUT/bench/results.jsonl; then per problem
when its first and last records appeared, which shows where the wall time went.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

# problem id: (file stem, expression of float v, a wrong one)
ELEMENTWISE_OPS = {
    "19": ("19_ReLU", "v > 0.f ? v : 0.f", "v > 0.f ? 0.5f * v : 0.f"),
    "21": ("21_Sigmoid", "1.f / (1.f + expf(-v))", "1.f / (1.f + expf(v))"),
    "22": ("22_Tanh", "tanhf(v)", "tanhf(0.5f * v)"),
    "25": ("25_Swish", "v / (1.f + expf(-v))", "v / (1.f + expf(v))"),
    "26": ("26_GELU_", "0.5f * v * (1.f + erff(v * 0.70710678f))", "0.5f * v * (1.f + erff(v))"),
    "28": ("28_HardSigmoid", "fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f)", "fminf(fmaxf(v / 3.f + 0.5f, 0.f), 1.f)"),
    "29": ("29_Softplus", "v > 20.f ? v : log1pf(expf(v))", "logf(expf(v))"),
    "30": ("30_Softsign", "v / (1.f + fabsf(v))", "v / (2.f + fabsf(v))"),
    "32": ("32_HardTanh", "fminf(fmaxf(v, -1.f), 1.f)", "fminf(fmaxf(v, -1.f), 0.5f)"),
}
BLOCKS = (128, 256, 512, 1024)
WRONG_EVERY = 5  # sample k is wrong when k % WRONG_EVERY == WRONG_EVERY - 1

# the file around a kernel, as models write it
CANDIDATE = r'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# sample %(sample)d of %(stem)s
cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
%(cuda)s"""

cpp_source = "%(prototype)s;"

ext = load_inline(
    name="%(function)s_%(name)s",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["%(function)s"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.ext = ext

    def forward(self, %(args)s):
        return self.ext.%(function)s(%(call)s)
'''

ELEMENTWISE = r'''
__global__ void op_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = x[idx];
        out[idx] = %(expr)s;
    }
}

torch::Tensor op_cuda(torch::Tensor x) {
    auto size = x.numel();
    auto out = torch::empty_like(x);
    const int block_size = %(block)d;
    const int64_t num_blocks = (size + block_size - 1) / block_size;
    op_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
'''

MSE = r'''
__global__ void mse_kernel(const float* __restrict__ a, const float* __restrict__ b, double* __restrict__ sum,
                           int64_t size) {
    __shared__ double part[%(block)d];
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += (int64_t)gridDim.x * blockDim.x) {
        double d = (double)a[i] - (double)b[i];
        acc += d * d;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, part[0]);
}

torch::Tensor mse_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto sum = torch::zeros({}, a.options().dtype(torch::kFloat64));
    const int block_size = %(block)d;
    const int num_blocks = 1024;
    mse_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), sum.data_ptr<double>(), size);
    return (sum / %(divisor)s).to(a.scalar_type());
}
'''


def candidate(problem_id: str, sample: int) -> str:
    """Sample `sample` for the problem: its block size and whether it is wrong follow from `sample`."""
    wrong = sample % WRONG_EVERY == WRONG_EVERY - 1
    block = BLOCKS[sample % len(BLOCKS)]
    if problem_id == "94":
        cuda = MSE % {"block": block, "divisor": "(size / 2)" if wrong else "size"}
        return CANDIDATE % {"sample": sample, "stem": "94_MSELoss", "cuda": cuda, "name": f"94_{sample}",
                            "function": "mse_cuda",
                            "prototype": "torch::Tensor mse_cuda(torch::Tensor a, torch::Tensor b)",
                            "args": "predictions, targets", "call": "predictions.contiguous(), targets.contiguous()"}
    stem, right, bad = ELEMENTWISE_OPS[problem_id]
    cuda = ELEMENTWISE % {"expr": bad if wrong else right, "block": block}
    return CANDIDATE % {"sample": sample, "stem": stem, "cuda": cuda, "name": f"{problem_id}_{sample}",
                        "function": "op_cuda", "prototype": "torch::Tensor op_cuda(torch::Tensor x)",
                        "args": "x", "call": "x.contiguous()"}


def write_candidates(kernelbench: Path, out: Path, n: int) -> list[Path]:
    """n candidates spread round-robin over the problems found in kernelbench/level1."""
    ids = [i for i in [*ELEMENTWISE_OPS, "94"] if list((kernelbench / "level1").glob(f"{i}_*.py"))]
    if not ids:
        raise SystemExit(f"No KernelBench level 1 problem among ids {', '.join([*ELEMENTWISE_OPS, '94'])} "
                         f"in {kernelbench / 'level1'}.")
    written = []
    for k in range(n):
        problem_id, sample = ids[k % len(ids)], k // len(ids)
        path = out / "level1" / problem_id / f"sample_{sample}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(candidate(problem_id, sample))
        written.append(path)
    return written


def phase_table(records: list[dict]) -> list[str]:
    phases = sorted({p for r in records for p in r.get("phases", {})},
                    key=lambda p: ("build", "start", "check", "time", "shapes").index(p)
                    if p in ("build", "start", "check", "time", "shapes") else 9)
    lines = [f"{'phase':<8} {'n':>4} {'sum s':>9} {'mean s':>8} {'max s':>8}"]
    for phase in phases:
        values = [r["phases"][phase] for r in records if phase in r.get("phases", {})]
        lines.append(f"{phase:<8} {len(values):>4} {sum(values):>9.1f} {sum(values) / len(values):>8.2f} "
                     f"{max(values):>8.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernelbench", type=Path, help="KernelBench's problems: the directory holding level1/")
    parser.add_argument("-n", type=int, default=50, help="candidates (default 50)")
    parser.add_argument("--out", type=Path, default=Path("build-ahead"), help="where everything goes")
    parser.add_argument("--jobs", default=None, help="harness sweep --jobs (default: its own)")
    parser.add_argument("--gpus", default=None, metavar="0,1", help="harness sweep --gpus (default: every GPU)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--time-cap", default="2")
    parser.add_argument("--keep-cache", action="store_true", help="reuse OUT/cache instead of emptying it")
    args = parser.parse_args()
    candidates, cache, results = args.out / "candidates", args.out / "cache", args.out / "sweep"
    shutil.rmtree(candidates, ignore_errors=True)
    shutil.rmtree(results, ignore_errors=True)
    if not args.keep_cache:
        shutil.rmtree(cache, ignore_errors=True)
    written = write_candidates(args.kernelbench, candidates, args.n)
    command = [sys.executable, "-m", "harness", "sweep", str(args.kernelbench), str(candidates), "-o", str(results),
               "--device", args.device, "--time-cap", args.time_cap, "--cache-dir", str(cache)]
    command += ["--jobs", args.jobs] if args.jobs else []
    command += ["--gpus", args.gpus] if args.gpus else []
    print(f"{len(written)} candidates in {candidates}; {len(os.sched_getaffinity(0))} cores; "
          f"running: {' '.join(command)}", flush=True)
    started = time.monotonic()
    sweep = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)})
    (arrivals,) = watch(sweep, started, lambda: line_count(results / "results.jsonl"))
    wall = time.monotonic() - started
    lines = (results / "results.jsonl").read_text().splitlines() if (results / "results.jsonl").is_file() else []
    records = [json.loads(line) for line in lines if line.strip()]
    verdicts: dict[str, int] = {}
    for r in records:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    wrong = [path for path in written if int(path.stem.split("_")[1]) % WRONG_EVERY == WRONG_EVERY - 1]
    missed = [f"{r['problem']} sample {r['sample']}" for r in records
              if int(str(r["sample"]).split("_")[-1]) % WRONG_EVERY == WRONG_EVERY - 1 and r["verdict"] == "correct"]
    print(f"\nwall {wall:.1f} s for {len(records)}/{len(written)} candidates (exit {sweep.returncode}); "
          f"verdicts {json.dumps(verdicts)}; {len(wrong)} written wrong on purpose"
          + (f", yet correct: {', '.join(missed)}" if missed else ", none of them correct"))
    print("\n".join(phase_table(records)))
    print("\n".join(timeline(records, arrivals)))
    return sweep.returncode


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def watch(sweep: subprocess.Popen, started: float, *counts: Callable[[], int]) -> list[list[float]]:
    """For each count (the lines of results.jsonl: the evaluations finished), the seconds from the
    start at which it rose, polled every 0.2 s until the sweep ends: which says where the wall time went."""
    arrivals: list[list[float]] = [[] for _ in counts]
    while True:
        ended = sweep.poll() is not None
        for count, seen in zip(counts, arrivals):
            seen += [time.monotonic() - started] * (count() - len(seen))
        if ended:
            return arrivals
        time.sleep(0.2)


def timeline(records: list[dict], arrivals: list[float]) -> list[str]:
    """Per problem, in the order evaluated: when its first and last records came, and the gap
    before its first (the reference's load and the wait for a build, less what overlapped)."""
    lines = [f"\n{'problem':<20} {'n':>3} {'first s':>8} {'last s':>8} {'gap s':>7}"]
    groups: dict[str, list[float]] = {}
    for record, at in zip(records, arrivals):
        groups.setdefault(record["problem"], []).append(at)
    previous = 0.0
    for problem, times in groups.items():
        lines.append(f"{problem:<20} {len(times):>3} {times[0]:>8.1f} {times[-1]:>8.1f} {times[0] - previous:>7.1f}")
        previous = times[-1]
    return lines


if __name__ == "__main__":
    sys.exit(main())
