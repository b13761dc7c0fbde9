"""Every KernelBench problem in a directory, each with a copy of its own `Model` as the
candidate: what a new user sees first. A copy must come out `correct` at about 1.0x; any
other verdict is the harness's failure or names the problem's own reason.

    python bench/kernelbench_sweep.py ../shared/kernelbench/level1 [--out sweep.jsonl]
        [--device cuda] [--limit N] [--start N] [--time-cap S] [--trials N] [--model-mode train|eval]

One JSON line per problem, written as it finishes; a second run skips the problems already in
the output (resumable). A table of verdicts at the end.
"""
import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions, evaluate_many  # noqa: E402
from harness.errors import HarnessError  # noqa: E402


def model_copy(problem: Path, directory: Path) -> Path:
    """A candidate that is the problem's own Model: its source plus a subclass. (An import of the
    problem would not do: the candidate is imported in another process, from another place.)"""
    path = directory / f"{problem.stem}_copy.py"
    path.write_text(problem.read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    return path


def number_order(path: Path) -> tuple:
    """KernelBench names start with the problem's number: 2_... before 10_..."""
    prefix = path.stem.split("_")[0]
    return (int(prefix) if prefix.isdigit() else float("inf"), path.stem)


def done_in(out: Path) -> set[str]:
    if not out.exists():
        return set()
    names = set()
    for line in out.read_text().splitlines():
        try:
            names.add(json.loads(line)["problem"])
        except (json.JSONDecodeError, KeyError):
            continue  # a line cut short by a kill: that problem runs again
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--out", type=Path, default=Path("kernelbench_sweep.jsonl"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--limit", type=int, default=None, help="at most this many problems (after --start)")
    parser.add_argument("--start", type=int, default=0, help="skip the first N problems in name order")
    parser.add_argument("--time-cap", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--model-mode", choices=["train", "eval"], default="train")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    problems = sorted(args.directory.glob("*.py"), key=number_order)
    problems = problems[args.start:][:args.limit]
    done = done_in(args.out)
    options = EvalOptions(device=args.device, trials=args.trials, time_cap=args.time_cap,
                          model_mode=args.model_mode, cache_dir=args.cache_dir)
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        for problem in problems:
            if problem.name in done:
                continue
            started = time.monotonic()
            line = {"problem": problem.name}
            try:
                result = evaluate_many(problem, [model_copy(problem, Path(tmp))], options)[0]
                line.update(verdict=result.verdict.value, explanation=result.explanation, speedup=result.speedup,
                            warnings=result.warnings, peak_memory=result.details.get("peak_memory"))
            except HarnessError as exc:  # the problem's own reason, in one paragraph
                line.update(verdict="problem_error", explanation=str(exc))
            line["seconds"] = round(time.monotonic() - started, 1)
            with args.out.open("a") as f:
                f.write(json.dumps(line) + "\n")
            console.print(f"{problem.name}: {line['verdict']} ({line['seconds']} s)")
    rows = [json.loads(x) for x in args.out.read_text().splitlines() if x.strip()] if args.out.exists() else []
    counts = collections.Counter(r["verdict"] for r in rows)
    table = Table(title=f"{len(rows)} problems in {args.out}")
    table.add_column("verdict")
    table.add_column("count", justify="right")
    table.add_column("problems (not correct)")
    for verdict, n in counts.most_common():
        names = "" if verdict == "correct" else ", ".join(r["problem"] for r in rows if r["verdict"] == verdict)
        table.add_row(verdict, str(n), names)
    console.print(table)


if __name__ == "__main__":
    main()
