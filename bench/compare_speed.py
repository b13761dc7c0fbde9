"""How long a trial's comparison takes on a GPU: compare.py's passes against the one pass of
checking/fused.py, by output size (KernelBench's level 1 outputs reach 8.6 GB).

    PYTHONPATH=$PWD python bench/compare_speed.py [--sizes-mb 16,134,537,2147,6442] [--dtype float32]

Each size: a reference output and a candidate within tolerance of it; each way timed as the
reference process runs it (compare.compare, its result read on the host), the median of 5 after one
warm-up, with a copy of the output beside them for scale (the least a comparison reads). Prints a
line a size and checks that both ways gave the same result.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from harness.engine.checking import compare, fused


def timed(run, repeats: int = 5) -> float:
    """Milliseconds, median of `repeats` after one warm-up, the device idle before and after each."""
    run()
    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="16,134,537,2147,6442")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/compare_speed.py needs a CUDA GPU: the one pass is a Triton kernel, and off a GPU "
                 "compare.py's passes are the only way.")
    dtype = getattr(torch, args.dtype)
    started = time.perf_counter()
    fused.warm(torch.device("cuda"))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; Triton imported and the kernel compiled "
          f"in {time.perf_counter() - started:.2f} s")
    tol = lambda name: (1e-4, 1e-4)  # noqa: E731
    for mb in map(int, args.sizes_mb.split(",")):
        ref = torch.randn(mb * 2**20 // dtype.itemsize, device="cuda").to(dtype)
        cand = (ref.float() * (1 + 1e-6)).to(dtype)
        one_pass = compare.compare(ref, cand, ["cuda:0"], tol)
        fast = timed(lambda: compare.compare(ref, cand, ["cuda:0"], tol))
        fused._failed = True  # compare.py's passes
        passes = compare.compare(ref, cand, ["cuda:0"], tol)
        slow = timed(lambda: compare.compare(ref, cand, ["cuda:0"], tol))
        fused._failed = False
        copy = timed(lambda: cand.clone())
        print(f"{mb:6d} MB {args.dtype}: passes {slow:7.2f} ms, one pass {fast:7.2f} ms ({slow / fast:4.1f}x), "
              f"a copy {copy:6.2f} ms; same result: {one_pass == passes}")
        del ref, cand
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
