"""What a worker's comparison of its input digests (taken before and after the candidate's call) costs,
on the host (both digests copied over, as 17e852e-cae92db compared them) against on the device
(integrity/digest.py's `changed`: each digest compared there, the answers read back once), alone on
the GPU and with another process's kernels running beside it, as the reference process's draw and
forward run beside a worker's trial.

    PYTHONPATH=$PWD python bench/digest_compare.py [--sizes-mb 64,1024,6144] [--trials 10] [--out FILE.json]

The digests are made and waited for before each comparison's clock starts, so only the comparison is
timed. Prints ms per comparison (median, then the largest) by input size, alone and beside the neighbour.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# the neighbour: 1 GB multiplied in place without pause, each kernel about half a millisecond
NEIGHBOUR = ("import torch\nx = torch.ones(1 << 28, device='cuda')\nprint('ready', flush=True)\n"
             "while True:\n    x.mul_(1.0)\n")


def on_host(before: list, after: list) -> list[int]:
    """`changed`'s answer the host way: both digests copied over, then compared."""
    import torch

    return [i for i, (a, b) in enumerate(zip(before, after)) if not torch.equal(a.cpu(), b.cpu())]


def compare_times(size_mb: int, trials: int) -> dict[str, list[float]]:
    """ms per comparison, host and device, over `trials` fresh inputs of `size_mb`."""
    import torch

    from harness.integrity import digest

    times: dict[str, list[float]] = {"host": [], "device": []}
    for trial in range(trials + 1):  # the first of each way is its first launch: not counted
        inputs = [torch.randn(size_mb << 18, device="cuda")]
        before, after = digest.digest(inputs), digest.digest(inputs)
        for way, compare in (("host", on_host), ("device", digest.changed)):
            torch.cuda.synchronize()
            started = time.perf_counter()
            assert compare(before, after) == []
            if trial:
                times[way].append((time.perf_counter() - started) * 1e3)
        del inputs, before, after
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="64,1024,6144", help="input sizes, MB, comma-separated")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", help="write every figure here as JSON")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/digest_compare.py needs a CUDA GPU: it times comparisons there, beside another process.")
    try:
        sizes = [int(size) for size in args.sizes_mb.split(",")]
    except ValueError:
        sys.exit(f"bench/digest_compare.py: --sizes-mb takes whole MB, comma-separated, not {args.sizes_mb!r}.")
    if args.trials < 1 or any(size < 1 for size in sizes):
        sys.exit("bench/digest_compare.py: --trials and every size must be at least 1.")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; ms per comparison, median (largest)")
    rows = []
    for beside in (False, True):
        neighbour = None
        if beside:
            neighbour = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdout=subprocess.PIPE, text=True)
            neighbour.stdout.readline()  # its tensor made: its kernels run from now
        try:
            for size in sizes:
                times = compare_times(size, args.trials)
                rows.append({"size_mb": size, "beside_a_neighbour": beside, **times})
                print(f"{size:6d} MB {'beside a neighbour' if beside else 'alone':19s} " + "  ".join(
                    f"{way} {statistics.median(t):7.2f} ({max(t):.2f})" for way, t in times.items()))
        finally:
            if neighbour:
                neighbour.kill()
                neighbour.wait()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
