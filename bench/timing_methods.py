"""Where does a timing method's overhead come from? Times one trusted candidate
(and the reference) several ways in one process, changing one thing at a time:

  harness        the harness's loop: fresh inputs per call, flush, device-wide sync before the end event
  fixed inputs   the same, one input set reused
  stream sync    fixed inputs, end event right after the call (no device-wide sync)
  do_bench       triton.testing.do_bench, median

    python bench/timing_methods.py PROBLEM CANDIDATE [--reps 100]

Only for candidates you trust: this runs them in-process.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import timing  # noqa: E402
from harness.worker import import_file, inputs_from_seed, randomize_parameters  # noqa: E402


def stream_synced(fn, args, reps: int, flush: torch.Tensor) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize()
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    device = torch.device("cuda")
    problem = import_file(args.problem, "problem")
    candidate_module = import_file(args.candidate, "candidate")
    init = problem.get_init_inputs()
    reference = problem.Model(*init)
    randomize_parameters(reference, 1)
    models = {"reference": reference.to(device).eval(),
              "candidate": candidate_module.ModelNew(*init).to(device).eval()}
    models["candidate"].load_state_dict(models["reference"].state_dict(), strict=False)
    fixed = inputs_from_seed(problem, device, 7)
    rule = timing.StopRule(min_samples=args.reps, max_samples=args.reps, time_cap=60)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    table = Table(title=f"{Path(args.candidate).name}: median ms by method")
    for column in ("model", "harness", "fixed inputs", "stream sync", "do_bench"):
        table.add_column(column, justify="right")
    with torch.no_grad():
        for name, model in models.items():
            fresh = timing.Timed(lambda seed: inputs_from_seed(problem, device, seed), model)
            same = timing.Timed(lambda seed: fixed, model)
            row = [name,
                   f"{timing.time_interleaved({'x': fresh}, device, rule)['x'].median:.4f}",
                   f"{timing.time_interleaved({'x': same}, device, rule)['x'].median:.4f}",
                   f"{stream_synced(model, fixed, args.reps, flush):.4f}"]
            try:
                from triton.testing import do_bench

                row.append(f"{do_bench(lambda: model(*fixed), return_mode='median'):.4f}")
            except ImportError:
                row.append("-")
            table.add_row(*row)
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
