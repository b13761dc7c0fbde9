"""Every shipped kernel against eager PyTorch and torch.compile, through the harness's own
evaluation (checks included), in one table: times, speedups and share of the measured peak.
A training problem (problems/rmsnorm_train.py, BACKWARD = True) is checked and timed forward
and backward, as `harness eval --backward` does; its row says so.

    python bench/kernels.py [--device cuda] [--only NAME ...] [--json FILE]

A problem's kernel is kernels/<problem>.py.  All kernels build at once first; then each is
checked and timed, one at a time on the GPU.
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import (EvalOptions, Evaluator, ProblemError, Roofline, evaluate_batch, speedup_text,  # noqa: E402
                     to_dict)


def kernel_for(problem: Path) -> Optional[Path]:
    kernel = REPO / "kernels" / problem.name
    return kernel if kernel.exists() else None


def share(roofline: Optional[Roofline]) -> str:
    parts = []
    if roofline and roofline.bandwidth_share is not None:
        parts.append(f"{roofline.bandwidth_share:.0%} of bandwidth")
    if roofline and roofline.flops_share is not None:
        parts.append(f"{roofline.flops_share:.0%} of fp32 FLOP/s")
    return ", ".join(parts) or "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="*", default=None, help="problem names (file stems)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--time-cap", type=float, default=10.0)
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    args = parser.parse_args()
    options = EvalOptions(device=args.device, cache_dir=args.cache_dir, compile_baseline=True,
                          time_cap=args.time_cap)
    console = Console()
    table = Table(title=f"kernels/ against eager and torch.compile ({args.device})")
    for column in COLUMNS:
        table.add_column(column, justify="right" if column.endswith(("ms", "eager", "compile", "IEEE")) else "left")
    everything = {}
    problems = [p for p in sorted((REPO / "problems").glob("*.py")) if not args.only or p.stem in args.only]
    with console.status("building every kernel at once"):
        prebuild(problems, options)
    for problem in problems:
        kernel = kernel_for(problem)
        if kernel is None:
            table.add_row(problem.stem, "(no kernel)", *["-"] * (len(COLUMNS) - 2))
            continue
        try:
            with console.status(f"{problem.stem}: checking and timing"):
                [result] = evaluate_batch(problem, [kernel], options)
        except ProblemError as exc:  # one broken problem leaves the others' rows standing
            console.print(f"[red]{exc}[/red]")
            table.add_row(problem.stem, "-", "problem error", *["-"] * (len(COLUMNS) - 4), str(exc)[:160])
            continue
        everything[f"{problem.stem}/{kernel.name}"] = to_dict(result)
        row = table_row(problem, kernel, result)
        table.add_row(*row)
        console.print(" | ".join(row))  # as it comes: a long batch cut short still says something
        if args.json:
            args.json.write_text(json.dumps(everything, indent=1))
    console.print(table)


def prebuild(problems: list[Path], options: EvalOptions) -> None:
    """Fill the build cache for all kernels in parallel; the per-problem batches that follow
    then only check and time.  A failed build is reported by its batch, so it is ignored here."""
    def build(problem: Path) -> None:
        kernel = kernel_for(problem)
        if kernel:
            try:
                Evaluator(problem, options).build(kernel)
            except Exception:  # noqa: BLE001 - the batch reports it with its context
                pass
    with ThreadPoolExecutor(max_workers=len(problems) or 1) as builders:
        list(builders.map(build, problems))


# Baselines under PyTorch's default settings (what users run) and, where those change the
# reference's numerics (TF32 convolutions), under IEEE float32 as well.
COLUMNS = ("problem", "candidate", "verdict", "eager ms", "compile ms", "kernel ms", "vs eager", "vs compile",
           "vs eager IEEE", "vs compile IEEE", "share of peak")


def table_row(problem: Path, kernel: Path, result) -> list[str]:
    ours = result.timings["candidate"].median if "candidate" in result.timings else None
    found = {(b.name, b.numerics if b.numerics != "same" else "default"): b for b in result.baselines}

    def figure(name: str, numerics: str, time: bool = False) -> str:
        b = found.get((name, numerics))
        if b is None:
            return "-"
        return f"{b.median_ms:.3f}" if time else speedup_text(b.speedup, b.interval)

    # a training problem (BACKWARD = True) is timed forward and backward, every column of the row
    label = f"{kernel.name} (forward and backward)" if result.backward else kernel.name
    return [problem.stem, label, result.verdict.value, figure("eager", "default", True),
            figure("torch.compile", "default", True), f"{ours:.3f}" if ours else "-",
            figure("eager", "default"), figure("torch.compile", "default"), figure("eager", "ieee"),
            figure("torch.compile", "ieee"), share(result.roofline) if result.ok else result.explanation[:160]]


if __name__ == "__main__":
    main()
