"""One GPU against several: the same work on `--gpus 0` and on `--gpus 0,1,...`, its verdicts
compared and its wall times side by side.

    python bench/gpus.py [--gpus 0,1] [--seeds DIR] [--suite KERNELBENCH_LEVEL_DIR [--first N]] [--no-batch] [--out DIR]

The batch: 16 or more candidates for problems/layernorm_4d.py, from the shipped kernel to ones
that fail on purpose (a compile error, an import error, wrong outputs, an input changed in
place, an exception in forward), plus the recorded answers in --seeds (default tests/seeds).
Each setting starts from an empty build cache, so both wall times include the same builds.
Verdicts must be equal, and the speedups of correct candidates must have overlapping intervals.

With --suite, `harness sweep --copies` over that directory (its first N problems per level, in
the sweep's order, with --first N) runs on one GPU, then on all of --gpus, each into a fresh output
directory, and the verdicts per problem are compared the same way. --no-batch leaves the batch out.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions, evaluate_batch  # noqa: E402
from harness.loop.extract import Extraction, extract  # noqa: E402
from harness.sweep.jobs import problem_levels, write_copy  # noqa: E402

PROBLEM = ROOT / "problems" / "layernorm_4d.py"
# each with a constructor that takes normalized_shape, as layernorm_4d's Model does
TEST_CANDIDATES = ["py_correct", "py_wrong", "syncs_in_forward", "waited_side_stream", "mutates_inputs",
                   "returns_empty", "raises_in_forward", "raises_at_import", "no_model_new", "cpp_compile_error",
                   "gpu_illegal_address"]


def batch(directory: Path, seeds: Path) -> list[Path]:
    copy = write_copy(PROBLEM, directory).rename(directory / "copy_of_model.py")  # apart from the kernel's name
    candidates = [ROOT / "kernels" / "layernorm_4d.py", ROOT / "tests" / "loop_candidates" / "layernorm_split_rows.py",
                  copy]
    candidates += [ROOT / "tests" / "candidates" / f"{name}.py" for name in TEST_CANDIDATES]
    for answer in sorted(seeds.glob("*.txt")):
        extracted = extract(answer.read_text())
        if extracted.status is Extraction.OK:
            path = directory / f"seed_{answer.stem}.py"
            path.write_text(extracted.code)
            candidates.append(path)
    return candidates


def timed(label: str, run) -> tuple[object, float]:
    started = time.monotonic()
    print(f"{label} ...", flush=True)
    outcome = run()
    return outcome, time.monotonic() - started


def overlap(a, b) -> bool:
    return bool(a and b) and a[0] <= b[1] and b[0] <= a[1]


def speedup(record) -> str:
    value, interval = record.get("speedup"), record.get("interval") or record.get("speedup_interval")
    if value is None:
        return "-"
    return f"{value:.3f}x [{interval[0]:.3f}-{interval[1]:.3f}]" if interval else f"{value:.3f}x"


def compare(console: Console, title: str, one: dict, many: dict, walls: tuple[float, float], gpus: str) -> int:
    """Rows by name; returns how many disagree."""
    table = Table(title=title)
    for column in ("candidate", "verdict, GPU 0", f"verdict, GPUs {gpus}", "speedup, GPU 0", f"speedup, GPUs {gpus}",
                   "agree"):
        table.add_column(column)
    differ = 0
    for name in sorted(set(one) | set(many)):
        a, b = one.get(name, {}), many.get(name, {})
        same = a.get("verdict") == b.get("verdict") and (
            a.get("speedup") is None or overlap(a.get("interval") or a.get("speedup_interval"),
                                               b.get("interval") or b.get("speedup_interval")))
        differ += not same
        table.add_row(name, str(a.get("verdict")), str(b.get("verdict")), speedup(a), speedup(b),
                      "yes" if same else "[red]no[/red]")
    console.print(table)
    console.print(f"wall: {walls[0]:.1f} s on GPU 0, {walls[1]:.1f} s on GPUs {gpus} "
                  f"({walls[0] / walls[1]:.2f}x); {differ} row(s) differ")
    return differ


def eval_batch(console: Console, gpus: list[int], seeds: Path, out: Path) -> int:
    candidates = batch(out, seeds)
    results = {}
    walls = []
    for setting in ([gpus[0]], gpus):
        options = EvalOptions(device="cuda", cache_dir=Path(tempfile.mkdtemp(prefix="gpus-cache-")))
        outcome, wall = timed(f"{len(candidates)} candidates on GPUs {setting}",
                              lambda: evaluate_batch(PROBLEM, candidates, options, setting))
        results[len(setting)] = {Path(r.candidate).name: {"verdict": r.verdict.value, "speedup": r.speedup,
                                                           "interval": r.speedup_interval} for r in outcome}
        walls.append(wall)
    (out / "eval_batch.json").write_text(json.dumps({"walls": walls, "results": results}, indent=1))
    return compare(console, f"{len(candidates)} candidates for layernorm_4d", results[1], results[len(gpus)],
                   (walls[0], walls[1]), ",".join(map(str, gpus)))


def first_problems(suite: Path, first: int, out: Path) -> Path:
    """A suite of links to `suite`'s first `first` problems of each level, as the sweep orders them."""
    linked = out / "first"
    for level, files in problem_levels(suite).items():
        (linked / level).mkdir(parents=True, exist_ok=True)
        for problem in files[:first]:
            (linked / level / problem.name).symlink_to(problem.resolve())
    return linked


def sweep_suite(console: Console, gpus: list[int], suite: Path, out: Path) -> int:
    records, walls = {}, []
    for setting in ([gpus[0]], gpus):
        directory = out / f"bench_{len(setting)}"
        command = [sys.executable, "-m", "harness", "sweep", str(suite), "--copies", "--out", str(directory),
                   "--gpus", ",".join(map(str, setting))]
        _, wall = timed(" ".join(command[1:]), lambda: subprocess.run(command, cwd=ROOT, check=False))
        walls.append(wall)
        if not (directory / "results.jsonl").exists():
            sys.exit(f"harness sweep wrote no results for {suite} on GPUs {setting} (its message is above).")
        records[len(setting)] = {f"{r['level']}/{r['problem']}": r for r in
                                 map(json.loads, (directory / "results.jsonl").read_text().splitlines())}
    return compare(console, f"harness sweep {suite} --copies", records[1], records[len(gpus)],
                   (walls[0], walls[1]), ",".join(map(str, gpus)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--seeds", type=Path, default=ROOT / "tests" / "seeds")
    parser.add_argument("--suite", type=Path, help="a directory of problems for harness sweep --copies")
    parser.add_argument("--first", type=int, default=None, metavar="N",
                        help="with --suite: only its first N problems of each level")
    parser.add_argument("--no-batch", action="store_true", help="leave out the 18-candidate batch")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    if len(gpus) < 2:
        parser.error("--gpus needs at least two GPUs to compare with the first alone")
    if args.first is not None and (args.first < 1 or not args.suite):
        parser.error("--first takes a count of 1 or more, with --suite")
    import torch

    if torch.cuda.device_count() <= max(gpus):
        sys.exit(f"bench/gpus.py needs GPUs {args.gpus}; this machine has {torch.cuda.device_count()}.")
    out = args.out or Path(tempfile.mkdtemp(prefix="gpus-"))
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    differ = 0 if args.no_batch else eval_batch(console, gpus, args.seeds, out)
    if args.suite:
        suite = first_problems(args.suite, args.first, out) if args.first else args.suite
        differ += sweep_suite(console, gpus, suite, out)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
