"""Where a fresh worker's first trial goes: a trial's steps, the first three trials, in a fresh process
with its CUDA context made, as a candidate's worker runs them (the harness's draws, digests and
comparison of the digests), by problem and by what the process made before its first trial.

    PYTHONPATH=$PWD python bench/first_trial.py PROBLEM.py ... [--out FILE.json]

Each problem's Model runs in four fresh interpreters: with its context alone ("fresh"); after cuBLAS's
and cuDNN's libraries were loaded on the host, no device work ("libraries loaded"); after the first
calls a reference's spare makes (workers/warm.py's first_calls, "first calls"); and after those and
one forward at the problem's own shapes ("forward ahead"). Prints a line per problem and way:
each trial's draw, digest, forward, digest compared after the call, and emptying the cache, in ms.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

WAYS = ("fresh", "libraries loaded", "first calls", "forward ahead")


def load_libraries() -> int:
    """cuBLAS's and cuDNN's shared libraries (every one torch's wheels ship) opened on the host, as a
    spare could open them beside another process's timing: no kernel runs. How many were opened."""
    import ctypes
    import glob
    import os

    import torch

    packages = Path(torch.__file__).parent.parent / "nvidia"
    names = sorted({*glob.glob(str(packages / "**" / "libcudnn*.so*"), recursive=True),
                    *glob.glob(str(packages / "**" / "libcublas*.so*"), recursive=True)})
    for name in names:
        ctypes.CDLL(name, mode=os.RTLD_LAZY)
    return len(names)
STEPS = ("draw", "digest", "forward", "compared", "free")


def child(problem_file: str, way: str) -> dict:
    """One fresh process's figures (run with --child)."""
    import torch

    from harness.engine.workers import warm
    from harness.engine.workers.common import build_model, import_file, inputs_from_seed, sync
    from harness.engine.workers.memory import free_cache
    from harness.integrity import digest

    device = torch.device("cuda")
    torch.empty(1, device=device)
    sync(device)
    found: dict = {}
    if way == "libraries loaded":
        started = time.monotonic()
        found["libraries"] = load_libraries()
        found["libraries_s"] = time.monotonic() - started
    elif way != "fresh":
        started = time.monotonic()
        with torch.no_grad():
            for step in warm.first_calls(device):
                step()
                sync(device)
        found["first_calls_s"] = time.monotonic() - started
    problem = import_file(problem_file, "problem")
    model = build_model(problem.Model, list(problem.get_init_inputs()), 1, device)
    if way == "forward ahead":
        with torch.no_grad():
            model(*inputs_from_seed(problem, device, 99))
        sync(device)
        free_cache(device)
    trials = []
    for trial in range(3):
        laps, started = {}, time.monotonic()

        def lap(name: str) -> None:
            nonlocal started
            sync(device)
            laps[name] = round((time.monotonic() - started) * 1e3, 1)
            started = time.monotonic()
        inputs = inputs_from_seed(problem, device, 1000 + trial)
        lap("draw")
        before = digest.digest(inputs)
        digest.totals(before)
        lap("digest")
        with torch.no_grad():
            outputs = model(*inputs)
        lap("forward")
        digest.changed(before, digest.digest(inputs))
        lap("compared")
        del inputs, before, outputs
        free_cache(device)
        lap("free")
        trials.append(laps)
    return {**found, "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", help="KernelBench-format problem files")
    parser.add_argument("--out", help="write every figure here as JSON")
    parser.add_argument("--child", nargs=2, metavar=("PROBLEM", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench/first_trial.py needs a CUDA GPU: it times the first launches of a process's kernels.")
    missing = [p for p in args.problems if not Path(p).is_file()]
    if missing or not args.problems:
        sys.exit(f"bench/first_trial.py: problem file {missing[0]} does not exist." if missing
                 else "bench/first_trial.py: name at least one problem file.")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; ms per step, trials 1 | 2 | 3")
    rows = []
    for problem in args.problems:
        for way in WAYS:
            run = subprocess.run([sys.executable, __file__, "--child", problem, way], capture_output=True, text=True)
            if run.returncode:
                print(f"{Path(problem).stem} ({way}): failed: {run.stderr.strip().splitlines()[-1:]}")
                continue
            found = json.loads(run.stdout.strip().splitlines()[-1])
            rows.append({"problem": problem, "way": way, **found})
            ahead = (f" (first calls {found['first_calls_s']:.2f} s)" if "first_calls_s" in found else
                     f" ({found['libraries']} libraries, {found['libraries_s']:.2f} s)" if "libraries" in found else "")
            print(f"{Path(problem).stem[:36]:36s} {way:16s}{ahead}: " + " | ".join(
                " ".join(f"{step} {trial[step]:g}" for step in STEPS) for trial in found["trials"]))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
