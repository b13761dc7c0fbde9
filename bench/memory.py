"""Peak memory of every harness process for a problem and candidate (by default a copy of the
problem's Model), against what an in-process evaluation needs: the inputs, the reference's
outputs, the candidate's outputs and the timing's flush buffer.

    python bench/memory.py PROBLEM [PROBLEM ...] [--candidate FILE] [--device cuda] [--trials N]
    python bench/memory.py --results BENCH_DIR/results.jsonl [PROBLEM ...]   (a bench's records)

Per process: host peak (VmHWM), and on a GPU torch.cuda.max_memory_allocated and the device's
used memory as that process last saw it (every process's, the CUDA contexts included). On a GPU
the "all" row also gives the device's used memory at its highest during the evaluation, less what
was used before it, sampled by nvidia-smi every 20 ms: the peak over all the harness's processes
at once, which is what must fit.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions  # noqa: E402
from harness.engine.evaluate import Evaluator  # noqa: E402
from harness.suite.jobs import SuiteError, write_copy  # noqa: E402
from harness.suite.records import read_records, sizes_of  # noqa: E402


def gb(n) -> str:
    return f"{n / 1e9:.2f}" if n else "-"


@contextmanager
def device_peak(device: str) -> Iterator[dict]:
    """The GPU's used memory at its highest while the block runs, less what was used before,
    in ["bytes"] afterwards (None without nvidia-smi or off a GPU)."""
    found: dict = {"bytes": None}
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    query = ["nvidia-smi", "-i", gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    try:
        before = int(subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.split()[0])
        sampler = subprocess.Popen(query + ["-lms", "20"], stdout=subprocess.PIPE, text=True)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        yield found
        return
    try:
        yield found
    finally:
        sampler.terminate()
        out, _ = sampler.communicate(timeout=30)
        used = [int(line) for line in out.split() if line.isdigit()]
        if used and device == "cuda":
            found["bytes"] = (max(used) - before) << 20


def add_rows(table: Table, name: str, verdict: str, sizes: dict, peaks: dict, failure: str = "",
             together: Optional[int] = None) -> None:
    need = sizes.get("in_process_need", 0)
    total_gpu = sum(p.get("gpu", 0) for p in peaks.values())
    first = [name, verdict, gb(sizes.get("inputs")), gb(sizes.get("outputs")), gb(need)]
    for role, peak in peaks.items():
        table.add_row(*first, role, gb(peak.get("host")), gb(peak.get("gpu")), gb(peak.get("device_used")))
        first = [""] * 5
    if not peaks:
        table.add_row(*first, "-", "", "", "")
    if total_gpu and need:
        table.add_row(*first, "all (sum)", "", f"{gb(total_gpu)} = {total_gpu / need:.2f}x need",
                      f"peak {gb(together)} = {together / need:.2f}x need" if together else "")
    if failure:
        table.add_row("", failure[:200], *[""] * 7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path)
    parser.add_argument("--results", type=Path, default=None,
                        help="a bench's results.jsonl: the table from its records (only those of PROBLEMS' "
                             "names where some are given), nothing run")
    parser.add_argument("--candidate", type=Path, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--time-cap", type=float, default=2.0)
    parser.add_argument("--model-mode", choices=["train", "eval"], default="train")
    args = parser.parse_args()
    table = Table(title="peak memory, GB")
    for column in ("problem", "verdict", "inputs", "outputs", "in-process need", "process", "host peak",
                   "gpu peak (allocated)", "device used"):
        table.add_column(column, justify="left" if column in ("problem", "verdict", "process") else "right")
    if args.results:
        wanted = {Path(p).stem for p in args.problems}
        try:
            records = read_records(args.results)
        except SuiteError as exc:
            sys.exit(str(exc))
        for record in records:
            if not wanted or record.problem in wanted:
                add_rows(table, f"{record.level}/{record.problem}", record.verdict, record.sizes, record.memory,
                         "" if record.correct else record.explanation)
        Console().print(table)
        return
    options = EvalOptions(device=args.device, trials=args.trials, time_cap=args.time_cap, model_mode=args.model_mode)
    with tempfile.TemporaryDirectory() as tmp:
        for problem in args.problems:
            candidate = args.candidate or write_copy(problem, Path(tmp))
            with device_peak(args.device) as peak, Evaluator(problem, options, keep_spare=False) as evaluator:
                result = evaluator.evaluate(candidate)
                info = evaluator.oracle_info
            add_rows(table, problem.name, result.verdict.value, sizes_of(info), result.details.get("peak_memory", {}),
                     "" if result.ok else result.explanation, peak["bytes"])
    Console().print(table)


if __name__ == "__main__":
    main()
