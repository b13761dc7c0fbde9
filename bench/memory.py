"""Peak memory of every harness process for a problem and candidate (by default a copy of the
problem's Model), against what an in-process evaluation needs: the inputs, the reference's
outputs, the candidate's outputs, the workspace a forward allocates beyond its outputs while it
runs (a copy of its input, a cuDNN workspace: measured on the reference at load, GPU only), both
models' parameters and the timing's flush buffer.

    python bench/memory.py PROBLEM [PROBLEM ...] [--candidate FILE] [--device cuda] [--trials N]
    python bench/memory.py --results SWEEP_DIR/results.jsonl [PROBLEM ...]   (a sweep's records)

Per process: host peak (VmHWM), and on a GPU torch.cuda.max_memory_allocated and the device's
used memory as that process last saw it (every process's, the CUDA contexts included). On a GPU
the "all" row also gives the device's used memory at its highest during the evaluation, less what
was used before it, sampled by nvidia-smi every 20 ms: the peak over all the harness's processes
at once, which is what must fit. --timeline DIR also draws that sampled curve per problem, with the
evaluation's phases marked, as DIR/<problem>.png (and the samples as .csv).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions  # noqa: E402
from harness.engine.evaluate import Evaluator  # noqa: E402
from harness.sweep.jobs import SuiteError, write_copy  # noqa: E402
from harness.sweep.records import read_records, sizes_of  # noqa: E402


def gb(n) -> str:
    return f"{n / 1e9:.2f}" if n else "-"


def smi(*what: str) -> list[str]:
    """An nvidia-smi command about the GPU this process sees, as CSV without header or units."""
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    return ["nvidia-smi", "-i", gpu, "--format=csv,noheader,nounits", *what]


def used_bytes() -> int:
    """The GPU's used memory now (raises OSError, ValueError or IndexError where nvidia-smi cannot tell)."""
    out = subprocess.run(smi("--query-gpu=memory.used"), capture_output=True, text=True, timeout=30).stdout
    return int(out.split()[0]) << 20


@contextmanager
def device_peak(device: str) -> Iterator[dict]:
    """The GPU's used memory at its highest while the block runs, less what was used before,
    in ["bytes"] afterwards (None without nvidia-smi or off a GPU). For a timeline, ["samples"]
    holds every (seconds since the start, bytes used less the start's), ["processes"] every
    (seconds, pid, bytes that process holds), and ["phases"] the (seconds, phase) passed to ["mark"]."""
    started = time.monotonic()
    found: dict = {"bytes": None, "samples": [], "processes": [], "phases": [], "roles": {}}
    found["mark"] = lambda phase: found["phases"].append((time.monotonic() - started, phase))
    if device != "cuda":
        yield found
        return
    try:
        before = used_bytes()
        samplers = [subprocess.Popen(smi("-lms", "20", what), stdout=subprocess.PIPE, text=True)
                    for what in ("--query-gpu=memory.used", "--query-compute-apps=pid,used_memory")]
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        yield found
        return

    def read_total() -> None:  # each line as it comes, so its time is known
        for line in samplers[0].stdout:
            if line.strip().isdigit():
                found["samples"].append((time.monotonic() - started, (int(line) << 20) - before))

    def read_processes() -> None:
        for line in samplers[1].stdout:
            pid, _, used = line.partition(",")
            if pid.strip().isdigit() and used.strip().isdigit():
                found["processes"].append((time.monotonic() - started, int(pid), int(used) << 20))

    readers = [threading.Thread(target=read, daemon=True) for read in (read_total, read_processes)]
    for reader in readers:
        reader.start()
    try:
        yield found
    finally:
        for sampler, reader in zip(samplers, readers):
            sampler.terminate()
            reader.join(timeout=30)
        if found["samples"]:
            found["bytes"] = max(b for _, b in found["samples"])


@contextmanager
def requests_marked(found: dict) -> Iterator[None]:
    """Every request the harness sends its processes, marked on the timeline as role:command; each
    process's pid is noted with its role."""
    from harness.engine.processes.child import Child

    send, forward = Child.send, Child.forward

    def mark(child, cmd) -> None:
        found["roles"][child.proc.pid] = child.role
        found["mark"](f"{child.role[:6]}:{cmd}")

    def marked_send(self, header, tensors=()):
        mark(self, header.get("cmd", ""))
        return send(self, header, tensors)

    def marked_forward(self, message, **extra):
        mark(self, extra.get("cmd", ""))
        return forward(self, message, **extra)

    Child.send, Child.forward = marked_send, marked_forward
    try:
        yield
    finally:
        Child.send, Child.forward = send, forward


def draw_timeline(path: Path, name: str, found: dict, need: int) -> None:
    """The device's used memory over one evaluation, its phases marked, against the in-process need."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["seconds,what,bytes"] + [f"{t:.3f},all,{b}" for t, b in found["samples"]]
    lines += [f"{t:.3f},{found['roles'].get(pid, pid)},{b}" for t, pid, b in found["processes"]]
    lines += [f"{t:.3f},{phase},-1" for t, phase in found["phases"]]
    path.with_suffix(".csv").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(12, 5))
    ax.plot([t for t, _ in found["samples"]], [b / 1e9 for _, b in found["samples"]], lw=1.2, label="device used")
    for pid in sorted({pid for _, pid, _ in found["processes"]}):
        points = [(t, b) for t, p, b in found["processes"] if p == pid]
        ax.plot([t for t, _ in points], [b / 1e9 for _, b in points], lw=0.8, label=str(found["roles"].get(pid, pid)))
    if need:
        ax.axhline(need / 1e9, color="green", ls="--", lw=1, label="in-process need")
        ax.axhline(1.1 * need / 1e9, color="red", ls=":", lw=1, label="need + 10%")
    for t, phase in found["phases"]:
        ax.axvline(t, color="grey", lw=0.5)
        ax.text(t, ax.get_ylim()[1], f" {phase}", rotation=90, va="top", fontsize=7)
    ax.set(xlabel="seconds", ylabel="GB used by the harness's processes", title=f"{name}: device memory")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def context_bytes(device: str) -> tuple[int, int]:
    """What one CUDA context holds on the device, bare and after a first matmul has loaded cuBLAS
    (its code and workspace): an in-process evaluation holds one context, the harness one per process.
    (0, 0) off a GPU or without nvidia-smi."""
    if device != "cuda":
        return 0, 0
    holder = None
    try:
        before = used_bytes()
        holder = subprocess.Popen([sys.executable, "-c", "import sys, torch; torch.empty(1, device='cuda'); "
                                   "torch.cuda.synchronize(); print('ready', flush=True); sys.stdin.readline(); "
                                   "a = torch.ones(256, 256, device='cuda'); a @ a; torch.cuda.synchronize(); "
                                   "print('ready', flush=True); sys.stdin.read()"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        used = []
        for _ in range(2):
            holder.stdout.readline()
            time.sleep(0.5)
            used.append(max(0, used_bytes() - before))
            holder.stdin.write("\n")
            holder.stdin.flush()
        return used[0], used[1]
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return 0, 0
    finally:
        if holder:
            holder.kill()
            holder.wait()


def add_rows(table: Table, name: str, verdict: str, sizes: dict, peaks: dict, failure: str = "",
             together: Optional[int] = None, context: int = 0) -> None:
    need = sizes.get("in_process_need", 0)
    total_gpu = sum(p.get("gpu", 0) for p in peaks.values())
    first = [name, verdict] + [gb(sizes.get(k)) for k in ("inputs", "outputs", "workspace", "parameters")] + [gb(need)]
    for role, peak in peaks.items():
        table.add_row(*first, role, gb(peak.get("host")), gb(peak.get("gpu")), gb(peak.get("device_used")))
        first = [""] * 7
    if not peaks:
        table.add_row(*first, "-", "", "", "")
    if total_gpu and need:
        with_context = (f", {together / (need + context):.2f}x with a context, "
                        f"{gb(together - need - context)} GB over that") if together and context else ""
        table.add_row(*first, "all (sum)", "", f"{gb(total_gpu)} = {total_gpu / need:.2f}x need",
                      f"peak {gb(together)} = {together / need:.2f}x need{with_context}" if together else "")
    if failure:
        table.add_row("", failure[:200], *[""] * 9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path)
    parser.add_argument("--results", type=Path, default=None,
                        help="a sweep's results.jsonl: the table from its records (only those of PROBLEMS' "
                             "names where some are given), nothing run")
    parser.add_argument("--candidate", type=Path, default=None)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--time-cap", type=float, default=2.0)
    parser.add_argument("--model-mode", choices=["train", "eval"], default="train")
    parser.add_argument("--timeline", type=Path, default=None,
                        help="a directory for each problem's memory curve (PNG, CSV), on a GPU")
    args = parser.parse_args()
    if args.timeline and args.device != "cuda":
        sys.exit("--timeline draws the GPU's memory as nvidia-smi samples it: it needs --device cuda.")
    if args.timeline and args.timeline.exists() and not args.timeline.is_dir():
        sys.exit(f"--timeline {args.timeline} is a file, not a directory for the curves.")
    table = Table(title="peak memory, GB")
    for column in ("problem", "verdict", "inputs", "outputs", "workspace", "parameters", "in-process need", "process",
                   "host peak", "gpu peak (allocated)", "device used"):
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
    context, with_cublas = context_bytes(args.device)
    if context:
        table.caption = (f"a CUDA context holds {gb(context)} GB, {gb(with_cublas)} GB once a matmul has loaded "
                         "cuBLAS: the harness has two (reference, candidate), an in-process evaluation one; "
                         "\"with a context\" counts that one, bare, in the need, and what is over that is mostly "
                         "the second context and each process's cuBLAS or cuDNN")
    options = EvalOptions(device=args.device, trials=args.trials, time_cap=args.time_cap, model_mode=args.model_mode)
    with tempfile.TemporaryDirectory() as tmp:
        for problem in args.problems:
            candidate = args.candidate or write_copy(problem, Path(tmp))
            with device_peak(args.device) as peak, requests_marked(peak), \
                    Evaluator(problem, options, keep_spare=False) as evaluator:
                result = evaluator.evaluate(candidate, on_phase=peak["mark"])
                info = evaluator.reference_info
            if args.timeline and peak["samples"]:
                args.timeline.mkdir(parents=True, exist_ok=True)
                draw_timeline(args.timeline / f"{problem.stem}.png", problem.stem, peak,
                              sizes_of(info).get("in_process_need", 0))
            add_rows(table, problem.name, result.verdict.value, sizes_of(info), result.details.get("peak_memory", {}),
                     "" if result.ok else result.explanation, peak["bytes"], context)
    Console().print(table)


if __name__ == "__main__":
    main()
