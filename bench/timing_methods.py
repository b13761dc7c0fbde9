"""Where does a timing method's overhead come from? Times one trusted candidate
(and the reference) several ways in one process, changing one thing at a time:

  beside         the harness's loop, interleaved with the other model (as `harness eval` times)
  harness        the same loop alone: fresh inputs per call, flush, device-wide sync before the end event
  fixed inputs   the same, one input set reused
  stream sync    fixed inputs, end event right after the call (no device-wide sync)
  do_bench       triton.testing.do_bench, median

    python bench/timing_methods.py PROBLEM CANDIDATE [--reps 100] [--device cuda|cpu]

On a CPU only the first three columns apply.

Only for candidates you trust: this runs them in-process.
"""
import argparse
import statistics
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import timing  # noqa: E402
from harness.engine.workers.common import import_file, inputs_from_seed, randomize_parameters  # noqa: E402


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


def gpu_columns(model, fixed, reps: int) -> list[str]:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    row = [f"{stream_synced(model, fixed, reps, flush):.4f}"]
    try:
        from triton.testing import do_bench

        row.append(f"{do_bench(lambda: model(*fixed), return_mode='median'):.4f}")
    except ImportError:
        row.append("-")
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/timing_methods.py: no CUDA GPU here; pass --device cpu to time on the CPU.")
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
    table = Table(title=f"{Path(args.candidate).name}: median ms by method")
    for column in ("model", "beside", "harness", "fixed inputs", "stream sync", "do_bench"):
        table.add_column(column, justify="right")
    fresh_inputs = lambda seed: inputs_from_seed(problem, device, seed)  # noqa: E731

    def median(timed: timing.Timed, beside: Optional[timing.Timed] = None) -> str:
        """`timed`'s median by the harness's loop, alone or interleaved with `beside`."""
        entries = {"x": timed, **({"other": beside} if beside else {})}
        return f"{timing.time_interleaved(entries, device, rule)['x'].median:.4f}"

    with torch.no_grad():
        for name, model in models.items():
            fresh = timing.Timed(fresh_inputs, model)
            other = next(m for n, m in models.items() if n != name)
            row = [name, median(fresh, timing.Timed(fresh_inputs, other)), median(fresh),
                   median(timing.Timed(lambda seed: fixed, model))]
            row += gpu_columns(model, fixed, args.reps) if device.type == "cuda" else ["-", "-"]
            table.add_row(*row)
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
