"""How much building one host does with more of its cores: the ceiling of a build farm made of it.

    PYTHONPATH=$PWD python bench/build_scaling.py [--slots 14,16,16,16] [--cores-per-group 16]
                                                  [--out DIR]

The host's CPUs are cut into groups of --cores-per-group (cores 0-15, 16-31, ...), as
bench/build_farm.py cuts its Ray nodes. Two settings, one after the other: the first group alone
runs its slots' builds at once (the GPU node alone: 14 builds on 16 cores), then every group runs
its slots' builds at once (the cluster: 14 + 16 + 16 + 16). Each build is one KernelBench-style
candidate (bench/build_ahead.py's, each a different file, so no two share a build) imported in a
fresh interpreter pinned to its group's cores, with an empty extensions folder of its own:
load_inline compiles the binding and the .cu and links them, as a sweep's build does, torch's
precompiled header made first. Printed for each setting: its wall, each build's mean and longest
seconds, builds a minute, and the ratio of builds a minute (the most a farm of these groups can
gain over the first group alone, whatever its scheduling).

Beside it, a CPU-bound spin (a Python loop, no memory traffic) on every core of the setting, 3 s:
its rate a core with one group busy against every group busy tells a slower core (shared cores,
lower clocks) from a slower memory system (the spin keeps its rate, the builds do not).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from build_ahead import ELEMENTWISE_OPS, candidate

ROOT = Path(__file__).resolve().parent.parent
SPIN = "import time\nend, n = time.perf_counter() + %s, 0\nwhile time.perf_counter() < end:\n    n += 1\nprint(n)"


def cores(group: int, per_group: int) -> str:
    return f"{group * per_group}-{(group + 1) * per_group - 1}"


def spin(groups: list[int], per_group: int, seconds: float) -> float:
    """Loop iterations a second on one core, median over every core of the groups, all spinning at once."""
    processes = [subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", SPIN % seconds],
                                  stdout=subprocess.PIPE, text=True)
                 for group in groups for core in range(group * per_group, (group + 1) * per_group)]
    return statistics.median(int(p.communicate()[0]) / seconds for p in processes)


def build_all(slots: list[int], per_group: int, work: Path, first: int) -> tuple[float, list[float]]:
    """Every group's builds at once, each in its own interpreter on its group's cores: the setting's
    wall and each build's seconds."""
    ids = list(ELEMENTWISE_OPS)
    started, processes = time.monotonic(), []
    for group, count in enumerate(slots):
        for k in range(count):
            n = first + len(processes)
            folder = work / f"build_{n}"
            folder.mkdir(parents=True)
            source = folder / "candidate.py"
            source.write_text(candidate(ids[n % len(ids)], n // len(ids) * 5))  # never a wrong one
            env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(folder / "ext"), "TORCH_CUDA_ARCH_LIST": "9.0",
                   "CUDA_VISIBLE_DEVICES": ""}
            command = ["taskset", "-c", cores(group, per_group), sys.executable, "-c",
                       f"import runpy, time; t = time.monotonic(); runpy.run_path({str(source)!r}); "
                       f"print('BUILT', time.monotonic() - t)"]
            processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
    seconds = []
    for process in processes:
        out = process.communicate()[0]
        built = [line for line in out.splitlines() if line.startswith("BUILT ")]
        if process.returncode or not built:
            raise SystemExit(f"a build failed (exit {process.returncode}); its output:\n{out[-2000:]}")
        seconds.append(float(built[-1].split()[1]))
    return time.monotonic() - started, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", default="14,16,16,16", help="builds at once in each group (default 14,16,16,16)")
    parser.add_argument("--cores-per-group", type=int, default=16)
    parser.add_argument("--spin-seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None, help="where the summary goes (JSON)")
    args = parser.parse_args()
    slots = [int(s) for s in args.slots.split(",")]
    per_group = args.cores_per_group
    if len(slots) * per_group > os.cpu_count():
        parser.error(f"--slots {args.slots}: {len(slots)} groups of {per_group} cores, the host has {os.cpu_count()}")
    subprocess.run([sys.executable, "-m", "harness", "doctor", "--prepare"], check=False,
                   env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, setting in (("first group alone", slots[:1]), ("every group", slots)):
            groups = list(range(len(setting)))
            rate = spin(groups, per_group, args.spin_seconds)
            wall, seconds = build_all(setting, per_group, Path(work) / name.replace(" ", "_"), sum(r["builds"] for r in rows))
            rows.append({"setting": name, "cores": len(setting) * per_group, "builds": len(seconds), "wall": wall,
                         "mean": statistics.mean(seconds), "longest": max(seconds),
                         "per_minute": 60 * len(seconds) / wall, "spin_per_core": rate})
            print(f"{name}: {len(seconds)} builds on {len(setting) * per_group} cores, wall {wall:.1f} s, build mean "
                  f"{statistics.mean(seconds):.1f} s, longest {max(seconds):.1f} s, {60 * len(seconds) / wall:.1f} a "
                  f"minute; spin {rate / 1e6:.2f} M loops a second a core", flush=True)
    alone, every = rows
    print(f"builds a minute, every group against the first alone: {every['per_minute'] / alone['per_minute']:.2f}x "
          f"with {every['cores'] / alone['cores']:.0f}x the cores; a build {every['mean'] / alone['mean']:.2f}x as long; "
          f"spin a core {every['spin_per_core'] / alone['spin_per_core']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
