"""What each fault a candidate can cause ends in, and how fast; and how fast a signal to
`harness eval` leaves no process behind.

    python bench/faults.py [--device cpu|cuda] [--cache-dir DIR]

Faults: the candidates in tests/candidates/ that crash, hang, flood, fork, fill the host's
memory (under a small --max-host-memory, so this is safe on a shared machine) and, on a GPU,
fault the device; each on tests/problems/small_layernorm.py through one Evaluator, then a
normal candidate on the same Evaluator. Signals: SIGINT, SIGTERM and SIGHUP to a `harness
eval` whose candidate sleeps in forward, timed from the signal until no process of the eval
is left (and, on a GPU, until the device's used memory is back to what it was before).
"""
import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from harness import EvalOptions, Evaluator  # noqa: E402
from harness.engine.processes.ownership import marked, running  # noqa: E402

CANDIDATES = REPO / "tests" / "candidates"
SMALL = REPO / "tests" / "problems" / "small_layernorm.py"

# (candidate, what it does, options changed for it)
FAULTS = [
    ("segfault", "segfaults in forward", {}),
    ("os_exit", "calls os._exit in forward", {}),
    ("hangs", "never returns", {"run_timeout": 10}),
    ("host_out_of_memory", "fills the host's memory", {"max_host_memory": 4 << 30}),
    ("fork_bomb", "forks without end", {"max_processes": 10}),
    ("floods_log", "writes without end to its log", {"max_log_bytes": 1 << 20}),
    ("big_file", "writes a huge file", {}),
    ("forks_sessions", "leaves daemons in new sessions", {}),
]
GPU_FAULTS = [
    ("gpu_illegal_address", "reads out of bounds on the GPU", {}),
    ("gpu_out_of_memory", "asks for more GPU memory than there is", {}),
    ("gpu_endless_kernel", "launches a kernel that never ends", {"run_timeout": 20}),
]


def device_used(device: str) -> int:
    if device != "cuda":
        return 0
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    out = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else 0


def faults(options: EvalOptions, console: Console) -> Table:
    table = Table(title=f"faults ({options.device}), each followed by a normal candidate on the same Evaluator")
    for column in ("candidate", "what it does", "verdict", "to verdict", "explanation", "then py_correct"):
        table.add_column(column)
    cases = FAULTS + (GPU_FAULTS if options.device == "cuda" else [])
    for name, does, changed in cases:
        # limits are the processes' own, set when the Evaluator starts them: one Evaluator per case
        with Evaluator(SMALL, dataclasses.replace(options, **changed), keep_spare=False) as evaluator:
            with console.status(f"{name}: {does}"):
                started = time.monotonic()
                result = evaluator.evaluate(CANDIDATES / f"{name}.py")
                took = time.monotonic() - started
                after = evaluator.evaluate(CANDIDATES / "py_correct.py")
        table.add_row(name, does, result.verdict.value, f"{took:.1f} s", result.explanation.splitlines()[0][:160],
                      after.verdict.value)
    return table


def signals(device: str, cache_dir: Path, console: Console) -> Table:
    table = Table(title=f"a signal to `harness eval` mid-candidate ({device})")
    for column in ("signal", "processes before", "exit status", "no process left after", "device memory"):
        table.add_column(column)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with tempfile.TemporaryDirectory() as tmp:
            pids = Path(tmp) / "pids.txt"
            before = device_used(device)
            harness = subprocess.Popen(
                [sys.executable, "-m", "harness", "eval", str(SMALL), str(CANDIDATES / "sleeps_in_forward.py"),
                 "--device", device, "--run-timeout", "300", "--cache-dir", str(cache_dir)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                env={**os.environ, "FORWARD_PIDS": str(pids), "PYTHONPATH": str(REPO)})
            with console.status(f"{signum.name}: waiting for the candidate to sleep in forward"):
                deadline = time.monotonic() + 300
                while not (pids.exists() and len(pids.read_text().split()) == 2) and harness.poll() is None \
                        and time.monotonic() < deadline:
                    time.sleep(0.1)
            processes = marked(f"{harness.pid}-")
            if harness.poll() is not None or not processes:
                table.add_row(signum.name, "-", str(harness.poll()), "the eval ended before the signal", "")
                harness.kill()
                continue
            held = device_used(device)
            sent = time.monotonic()
            harness.send_signal(signum)
            while (any(running(p) for p in processes) or device_used(device) > before + 64) \
                    and time.monotonic() < sent + 30:
                time.sleep(0.02)
            gone = time.monotonic() - sent
            left = [p for p in processes if running(p)]
            harness.communicate(timeout=60)
            memory = f"{held} MiB while running, {device_used(device)} after" if device == "cuda" else "-"
            table.add_row(signum.name, str(len(processes)), str(harness.returncode),
                          f"{gone:.2f} s" if not left else f"{len(left)} still running after 30 s", memory)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    console = Console(width=200)  # a log keeps each row on a line
    options = EvalOptions(device=args.device, cache_dir=args.cache_dir, run_timeout=60, time_cap=2)
    console.print(faults(options, console))
    console.print(signals(args.device, options.resolved_cache(), console))


if __name__ == "__main__":
    main()
