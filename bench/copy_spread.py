"""Two instances of one problem's Model, the second a copy (parameters and buffers loaded from the
first), timed interleaved in one process, in several fresh processes: does a copy's time move with
the instance (allocation, algorithm choice) or with the process? Prints each process's medians.

    python bench/copy_spread.py PROBLEM.py [--processes 3] [--benchmark]

--benchmark turns cuDNN's autotuner on (torch.backends.cudnn.benchmark), which KernelBench leaves off.
Needs a CUDA GPU; protocol: 256 MB written before each call, CUDA events, calls alternated, median.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys


def one_process(path: str, benchmark: bool, samples: int) -> dict:
    import torch

    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    torch.backends.cudnn.rnn.fp32_precision = "ieee"
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    spec = importlib.util.spec_from_file_location("problem", path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    a = problem.Model(*problem.get_init_inputs()).cuda()
    b = problem.Model(*problem.get_init_inputs()).cuda()
    b.load_state_dict(a.state_dict())
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in problem.get_inputs()]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = {"a": [], "b": []}
    with torch.no_grad():
        for _ in range(3):
            a(*inputs), b(*inputs)
        for i in range(samples):
            for name, model in (("a", a), ("b", b)) if i % 2 else (("b", b), ("a", a)):
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problem")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--benchmark", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.problem, args.benchmark, args.samples)))
        return
    for n in range(args.processes):
        flags = ["--benchmark"] if args.benchmark else []
        out = subprocess.run([sys.executable, __file__, args.problem, "--child", "--samples", str(args.samples), *flags],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"process {n} failed: {out.stderr.strip().splitlines()[-1:]}")
        medians = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"process {n}: instance a {medians['a']:.4g} ms, copy b {medians['b']:.4g} ms, "
              f"b/a {medians['b'] / medians['a']:.3f}", flush=True)


if __name__ == "__main__":
    main()
