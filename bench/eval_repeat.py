"""End-to-end time and repeatability of `harness eval`: N separate evaluations
of one candidate (each a fresh Evaluator, as the CLI does), in one table.

    python bench/eval_repeat.py PROBLEM CANDIDATE [-n 3] [--device cuda] [--cache-dir DIR]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions, evaluate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("-n", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--compile-baseline", action="store_true")
    args = parser.parse_args()
    options = EvalOptions(device=args.device, cache_dir=args.cache_dir, compile_baseline=args.compile_baseline)
    table = Table(title=f"{Path(args.candidate).name} on {Path(args.problem).name}")
    for column in ("eval", "verdict", "build", "wall s", "ref ms", "cand ms", "speedup", "n", "cand IQR/median"):
        table.add_column(column, justify="right")
    speedups = []
    for i in range(args.n):
        started = time.monotonic()
        result = evaluate(args.problem, args.candidate, options)
        wall = time.monotonic() - started
        build = "cached" if result.build and result.build.cached else (
            f"{result.build.seconds:.1f} s" if result.build else "-")
        if result.ok:
            ref, cand = result.timings["reference"], result.timings["candidate"]
            speedups.append(result.speedup)
            table.add_row(str(i + 1), result.verdict.value, build, f"{wall:.1f}", f"{ref.median:.4f}",
                          f"{cand.median:.4f}", f"{result.speedup:.3f}x", f"{cand.n}/{ref.n}",
                          f"{cand.spread:.2%}")
        else:
            table.add_row(str(i + 1), result.verdict.value, build, f"{wall:.1f}", "", "", "", "", "")
    console = Console(width=120)
    console.print(table)
    if len(speedups) > 1:
        spread = (max(speedups) - min(speedups)) / statistics.median(speedups)
        console.print(f"speedup over {len(speedups)} evals: median {statistics.median(speedups):.3f}x, "
                      f"range {min(speedups):.3f}x to {max(speedups):.3f}x ({spread:.1%} of the median)")


if __name__ == "__main__":
    main()
