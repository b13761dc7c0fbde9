"""Peak memory of every harness process for a problem and candidate (by default a copy of the
problem's Model), against what an in-process evaluation needs: the inputs, the reference's
outputs, the candidate's outputs and the timing's flush buffer.

    python bench/memory.py PROBLEM [PROBLEM ...] [--candidate FILE] [--device cuda] [--trials N]

Per process: host peak (VmHWM), and on a GPU torch.cuda.max_memory_allocated and the device's
used memory as that process last saw it (every process's, the CUDA contexts included).
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions  # noqa: E402
from harness.engine.evaluate import FLUSH_BYTES, Evaluator  # noqa: E402
from harness.suite.jobs import write_copy  # noqa: E402


def gb(n) -> str:
    return f"{n / 1e9:.2f}" if n else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--candidate", type=Path, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--time-cap", type=float, default=2.0)
    parser.add_argument("--model-mode", choices=["train", "eval"], default="train")
    args = parser.parse_args()
    options = EvalOptions(device=args.device, trials=args.trials, time_cap=args.time_cap, model_mode=args.model_mode)
    table = Table(title="peak memory, GB")
    for column in ("problem", "verdict", "inputs", "outputs", "in-process need", "process", "host peak",
                   "gpu peak (allocated)", "device used"):
        table.add_column(column, justify="left" if column in ("problem", "verdict", "process") else "right")
    with tempfile.TemporaryDirectory() as tmp:
        for problem in args.problems:
            candidate = args.candidate or write_copy(problem, Path(tmp))
            with Evaluator(problem, options, keep_spare=False) as evaluator:
                result = evaluator.evaluate(candidate)
                info = evaluator.oracle_info
            need = info.input_bytes + 2 * info.output_bytes + FLUSH_BYTES
            peaks = result.details.get("peak_memory", {})
            total_gpu = sum(p.get("gpu", 0) for p in peaks.values())
            first = [problem.name, result.verdict.value, gb(info.input_bytes), gb(info.output_bytes), gb(need)]
            for role, peak in peaks.items():
                table.add_row(*first, role, gb(peak.get("host")), gb(peak.get("gpu")), gb(peak.get("device_used")))
                first = [""] * 5
            if total_gpu:
                table.add_row(*first, "all (sum)", "", f"{gb(total_gpu)} = {total_gpu / need:.2f}x need", "")
            if not result.ok:
                table.add_row("", result.explanation[:200], *[""] * 7)
    Console().print(table)


if __name__ == "__main__":
    main()
