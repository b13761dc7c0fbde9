"""Does a host-bound reference time the same with builds running as without? Three short
launches (well under 0.1 ms together on a GPU) timed by the reference process alone, then
while N KernelBench-style builds run (bench/build_ahead.py's candidates, an empty cache, so
every one compiles), then alone again.

    PYTHONPATH=$PWD python bench/timing_beside_builds.py [-n 14] [--device cuda] [--time-cap 3]

On a GPU host of 4 cores or more the reference process runs on the cores kept for timing
(harness/engine/processes/cores.py) and the builds on the others at low priority: the median beside
the builds should fall within the interval of the medians alone. Printed: each median with
its 95% interval (1.96 relative standard errors), the builds running when the timing ended,
and the cores each side had.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from build_ahead import ELEMENTWISE_OPS, candidate  # noqa: E402
from harness.engine.processes.cores import default_build_jobs, split_cores  # noqa: E402
from harness.engine.evaluate import EvalOptions, Evaluator  # noqa: E402
from harness.engine.pool import Builds  # noqa: E402

# three launches on a small tensor: each costs its launch, not its bytes
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return ((x + 1.0) * 2.0) - 3.0


def get_inputs():
    return [torch.rand(4096)]


def get_init_inputs():
    return []
'''


def interval(timing) -> str:
    half = 1.96 * timing.rel_se * timing.median
    return f"{timing.median:.4f} ms [{timing.median - half:.4f}, {timing.median + half:.4f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=None, help="builds at once (default: harness sweep's default)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--time-cap", type=float, default=3.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="timing-beside-builds-"))
    problem = work / "three_launches.py"
    problem.write_text(PROBLEM)
    n = args.n or default_build_jobs(args.device)
    ids = list(ELEMENTWISE_OPS)
    sources = []
    for k in range(n):
        path = work / "candidates" / f"c{k}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(candidate(ids[k % len(ids)], 100 + k))  # samples no sweep writes: no cache to share
        sources.append(path)
    options = EvalOptions(device=args.device, cache_dir=work / "cache", time_cap=args.time_cap)
    cores = split_cores(args.device)
    print(f"timing on cores {list(cores.timing) or 'all (no reservation)'}, builds on {list(cores.build)}, "
          f"{n} builds", flush=True)
    with Evaluator(problem, options) as evaluator, Builds(n) as builds:
        evaluator.start_reference()
        alone = evaluator.time_reference()
        print(f"alone:          {interval(alone)}", flush=True)
        futures = [builds.submit(evaluator, path) for path in sources]
        while builds.running < min(n, len(sources)) and not all(f.done() for f in futures):
            time.sleep(0.2)
        time.sleep(5.0)  # past the builds' Python start, into nvcc's front ends
        beside = evaluator.time_reference()
        running = builds.running
        print(f"beside builds:  {interval(beside)} ({running} builds running when it ended)", flush=True)
        for future in futures:
            future.result()
        again = evaluator.time_reference()
        print(f"alone again:    {interval(again)}", flush=True)
    low = min(alone.median * (1 - 1.96 * alone.rel_se), again.median * (1 - 1.96 * again.rel_se))
    high = max(alone.median * (1 + 1.96 * alone.rel_se), again.median * (1 + 1.96 * again.rel_se))
    same = low <= beside.median <= high
    print(f"beside / alone: {beside.median / alone.median:.3f}x; "
          f"{'within' if same else 'OUTSIDE'} the intervals alone")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
