"""The harness's timing protocol against triton.testing.do_bench, for trusted kernels.

For each problem with a kernel in kernels/ (or the pairs given), in one process:

  harness        the harness's loop as `harness eval` runs it: candidate and reference
                 interleaved, fresh inputs per call, L2 flushed, calls queued between events;
                 repeated --reps times, median and spread (max - min over the median) of the medians
  synchronous    the same calls with a device-wide synchronize before each end event (the
                 harness's few check samples for work hidden on other streams; its protocol until 2026-11)
  do_bench       triton.testing.do_bench on one fixed input set, median
  speedup        eager / kernel by the harness, with its spread over the repetitions

    python bench/timing_methods.py [--only NAME ...] [--reps 5] [--compile] [--json OUT]

Only for candidates you trust: this runs them in-process.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness.engine.timing import clock  # noqa: E402
from harness.engine.workers.common import (copy_parameters, import_file, inputs_from_seed,  # noqa: E402
                                           randomize_parameters, settle)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def do_bench(fn, args) -> float:
    from triton.testing import do_bench as triton_do_bench

    with torch.no_grad():
        return triton_do_bench(lambda: fn(*args), return_mode="median")


def measure(problem_path: Path, kernel_path: Path, reps: int, with_compile: bool, time_cap: float) -> dict:
    device = torch.device("cuda")
    problem = import_file(str(problem_path), f"problem_{problem_path.stem}")
    kernel = import_file(str(kernel_path), f"kernel_{kernel_path.stem}")
    init = list(problem.get_init_inputs())
    torch.manual_seed(0)
    reference = problem.Model(*init)
    randomize_parameters(reference, 1)
    candidate = kernel.ModelNew(*init)
    copy_parameters(reference, candidate)
    models = {"kernel": candidate.to(device).eval(), "eager": reference.to(device).eval()}
    if with_compile:
        models["torch.compile"] = torch.compile(models["eager"])
    make = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731
    fixed = make(7)
    rule = clock.StopRule(time_cap=time_cap, min_samples=20)
    runs = []
    for _ in range(reps):
        runs.append(clock.time_interleaved({name: clock.Entry(make, m) for name, m in models.items()}, device, rule))
    row = {}
    for name, model in models.items():
        medians = [r[name].median for r in runs]
        row[name] = {"harness": statistics.median(medians), "spread": spread(medians),
                     "synchronous": statistics.median(r[name].sync_median for r in runs),
                     "host_submit": statistics.median(r[name].submit_median for r in runs),
                     "do_bench": do_bench(model, fixed)}
    speedups = [r["eager"].median / r["kernel"].median for r in runs]
    row["speedup"] = {"median": statistics.median(speedups), "spread": spread(speedups)}
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None, help="problem names (file stems)")
    parser.add_argument("--reps", type=int, default=5, help="separate timings of each (default 5)")
    parser.add_argument("--time-cap", type=float, default=3.0)
    parser.add_argument("--compile", action="store_true", help="also torch.compile of each reference")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/timing_methods.py compares GPU protocols with do_bench: it needs a CUDA GPU.")
    settle(torch.device("cuda"))  # IEEE float32, as in the harness's processes
    console = Console(width=160)
    table = Table(title="median ms by protocol (spread: max - min of the repetitions' medians, over their median)")
    for column in ("problem", "model", "harness", "spread", "do_bench", "harness / do_bench", "synchronous",
                   "host submit"):
        table.add_column(column, justify="left" if column in ("problem", "model") else "right")
    report = {}
    for problem in sorted((REPO / "problems").glob("*.py")):
        kernel = REPO / "kernels" / problem.name
        if not kernel.exists() or (args.only and problem.stem not in args.only):
            continue
        row = report[problem.stem] = measure(problem, kernel, args.reps, args.compile, args.time_cap)
        for model, t in row.items():
            if model == "speedup":
                continue
            table.add_row(problem.stem, model, f"{t['harness']:.4f}", f"{t['spread']:.2%}", f"{t['do_bench']:.4f}",
                          f"{t['harness'] / t['do_bench'] - 1:+.2%}", f"{t['synchronous']:.4f}",
                          f"{t['host_submit']:.4f}")
        table.add_row(problem.stem, "speedup over eager", f"{row['speedup']['median']:.3f}x",
                      f"{row['speedup']['spread']:.2%}", "", "", "", "")
        console.print(f"{problem.stem}: {json.dumps(row)}")  # as it comes
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    console.print(table)


if __name__ == "__main__":
    main()
