"""Candidates for several problems through one harness.Judge, as a trainer's reward function
hands them in: each candidate's source text, each record printed as it finishes, then the
candidates a minute and the seconds a candidate spent in each phase. A second call in the same
process (--calls 2) shows what the judge keeps warm: no reference process starts again.

    python examples/batch_eval.py --device cpu
    python examples/batch_eval.py problems kernels --gpus 0,1 --samples 4

PROBLEMS and CANDIDATES are laid out as `harness sweep` takes them (a candidate per problem as
CANDIDATES/<problem name>.py, several as CANDIDATES/<problem name>/*.py, or KernelBench's
layouts). By default, on the CPU, the tests' three small problems and their five candidates;
on a GPU, problems/ and the shipped kernels/.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness beside this file, installed or not

from harness import EvalOptions, HarnessError, Judge, Request, SweepRecord  # noqa: E402
from harness.engine.phases import Phase  # noqa: E402
from harness.sweep.jobs import find_jobs  # noqa: E402

PHASES = [Phase.BUILD, Phase.START, Phase.CHECK, Phase.TIME, Phase.SHAPES]


def requests(problems: Path, candidates: Path, samples: int) -> list[Request]:
    """Each candidate file's text, `samples` times under labels of their own, as a trainer's
    samples of one prompt would come."""
    found = []
    for job in find_jobs(problems, candidates):
        text = job.candidate.read_text()
        found += [Request(job.problem, text, job.label if samples == 1 else f"{job.label}#{k}")
                  for k in range(samples)]
    return found


def line(record: SweepRecord, since: float) -> str:
    speedup = f"{record.speedup:.2f}x" if record.speedup is not None else "-"
    phases = " ".join(f"{p.value} {record.phases[p.value]:.2f}" for p in PHASES if p.value in record.phases)
    return (f"  {time.monotonic() - since:6.1f} s  {record.level}/{record.problem:<16} {record.candidate:<22} "
            f"{record.verdict:<14} {speedup:>8}  {phases}")


def summary(records: list[SweepRecord], wall: float, opened: int) -> str:
    n = len(records)
    means = "  ".join(f"{p.value} {sum(r.phases.get(p.value, 0.0) for r in records) / n:.2f}" for p in PHASES)
    return (f"  {n} candidates in {wall:.1f} s: {60 * n / wall:.1f} candidates a minute; "
            f"pools opened: {opened} (a reference process each)\n"
            f"  seconds a candidate by phase (mean): {means}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", nargs="?", type=Path, help="a suite folder (default: by device, above)")
    parser.add_argument("candidates", nargs="?", type=Path, help="its candidates' folder")
    parser.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    parser.add_argument("--gpus", default="", help="physical GPU indices, one timing slot each, as 0,1")
    parser.add_argument("--samples", type=int, default=1, help="evaluate each candidate this many times")
    parser.add_argument("--calls", type=int, default=2, help="calls on the same judge (default 2)")
    parser.add_argument("--time-cap", type=float, default=None, help="seconds of timing a candidate at most")
    parser.add_argument("--log", type=Path, default=None,
                        help="results folders: call k's in LOG/call-k, resumed where it holds records")
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    problems = args.problems or ROOT / ("tests/problems/sweep/level1" if cpu else "problems")
    candidates = args.candidates or ROOT / ("tests/candidates/sweep" if cpu else "kernels")
    options = EvalOptions(device=args.device)
    if args.time_cap is not None:
        options.time_cap = args.time_cap
    gpus = [int(g) for g in args.gpus.split(",") if g.strip()]
    try:  # no GPU, no candidates found, a results log that cannot be read: each said in a paragraph
        batch = requests(problems, candidates, args.samples)
        print(f"{len(batch)} candidates for {len({r.problem for r in batch})} problems on "
              f"{args.device if not gpus else 'GPUs ' + args.gpus}")
        with Judge(options, gpus) as judge:
            for call in range(1, args.calls + 1):
                evaluate(judge, batch, call, args.log)
    except HarnessError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def evaluate(judge: Judge, batch: list[Request], call: int, log: Path | None) -> None:
    """One call: each record as it comes, then the call's rate and phases."""
    print(f"call {call}:")
    started, opened = time.monotonic(), judge.opened
    records = []
    for record in judge.evaluate(batch, log=log / f"call-{call}" if log else None):
        records.append(record)
        print(line(record, started), flush=True)
    print(summary(records, time.monotonic() - started, judge.opened - opened), flush=True)


if __name__ == "__main__":
    sys.exit(main())
