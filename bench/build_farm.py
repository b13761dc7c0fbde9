"""Builds spread over a Ray cluster against one GPU node alone, with every verdict compared.

N KernelBench-style CUDA candidates (bench/build_ahead.py's: `#include <torch/extension.h>` in
the .cu, one in five wrong on purpose, no two alike, so no two share a cache entry) for small
problems written here (nine level 1 activations and MSELoss on [0, 1) inputs), through
`harness sweep` twice, each from an empty build cache: on the GPU node alone, then with `--ray`
over a cluster made of this host. Printed: each run's wall time and when its last build ended,
the ratios (goal: builds at least 3x faster), whether every verdict matched, and where the
cluster's builds ran.

On a 64-core host with 4 GPUs and no network, the wheels of Ray (and of what it needs) and of
rich in .whl/, from the repository's root:

    pip install --no-index --find-links .whl --target /tmp/pydeps ray rich
    PYTHONPATH=$PWD:/tmp/pydeps python bench/build_farm.py --out /tmp/build-farm

The GPU node is cores 0-15 and GPU 0; the GPU-less nodes (--build-nodes, 3) have the next 16
cores each (16-31, 32-47, 48-63), no GPU offered to Ray and none visible (CUDA_VISIBLE_DEVICES
empty). They are this script's own processes (ray.cluster_utils), ended with it. The baseline
is `harness sweep` under `taskset -c 0-15` with only GPU 0 visible (so 14 cores build, as on a
16-core GPU host); the cluster's driver runs there too. torch's precompiled header is made first
(`harness doctor --prepare`), for both runs alike.

`--runs alone` and then `--runs ray` split the two across calls (each run's summary is kept in
--out, and the comparison reads the other run from there). About 8 minutes with the defaults: the baseline is bound by its 50 builds of ~100 CPU-seconds on
14 build cores (~5-6 min), the cluster run by one round of builds on 62 slots and then the GPU's
turn at each candidate (~2 min). Fewer candidates (-n) for less.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from build_ahead import ELEMENTWISE_OPS, WRONG_EVERY, line_count, phase_table, watch, write_candidates

ROOT = Path(__file__).resolve().parent.parent

# problem id: forward's expression of x, as the problem's reference
TORCH_OPS = {"19": "torch.relu(x)", "21": "torch.sigmoid(x)", "22": "torch.tanh(x)", "25": "x * torch.sigmoid(x)",
             "26": "F.gelu(x)", "28": "F.hardsigmoid(x)", "29": "F.softplus(x)", "30": "x / (1 + torch.abs(x))",
             "32": "F.hardtanh(x, -1.0, 1.0)"}
PROBLEM = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, %(args)s):
        return %(expr)s


def get_inputs():
    return [%(inputs)s]


def get_init_inputs():
    return []
'''


def write_problems(out: Path, rows: int, cols: int) -> Path:
    """The problems as KernelBench's level 1 names them, under out/level1/, inputs rows x cols."""
    level = out / "level1"
    level.mkdir(parents=True, exist_ok=True)
    draw = f"torch.rand({rows}, {cols})"
    for problem_id, expr in TORCH_OPS.items():
        (level / f"{ELEMENTWISE_OPS[problem_id][0]}.py").write_text(
            PROBLEM % {"args": "x", "expr": expr, "inputs": draw})
    (level / "94_MSELoss.py").write_text(PROBLEM % {"args": "predictions, targets",
                                                    "expr": "torch.mean((predictions - targets) ** 2)",
                                                    "inputs": f"{draw}, {draw}"})
    return out


@dataclass
class Run:
    name: str
    wall: float
    last_build: float  # seconds from the start to the last build's end (its record in the cache)
    records: dict  # (problem, candidate): the record
    returncode: int


def sweep(name: str, args: argparse.Namespace, problems: Path, candidates: Path, *extra: str) -> None:
    """One `harness sweep` on the GPU node's cores, from an empty cache; its summary kept in --out."""
    out, cache = args.out / name, args.out / f"cache-{name}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    command = ["taskset", "-c", cores(0, args.cores_per_node), sys.executable, "-m", "harness", "sweep",
               str(problems), str(candidates), "-o", str(out), "--device", "cuda", "--time-cap", args.time_cap,
               "--cache-dir", str(cache), *extra]
    print(f"\n{name}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    # the GPU node's one GPU: the harness keeps 2 of its cores for timing and builds on the other 14
    process = subprocess.Popen(command, env={**environment(), "CUDA_VISIBLE_DEVICES": str(args.gpu)})
    arrivals, builds = watch(process, started, lambda: line_count(out / "results.jsonl"),
                             lambda: len(list(cache.glob("builds/*/build.json"))))
    wall = time.monotonic() - started
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()] \
        if (out / "results.jsonl").is_file() else []
    print(f"{name}: {len(records)} records, the first at {arrivals[0] if arrivals else float('nan'):.1f} s")
    print("\n".join(phase_table(records)))
    summary = {"wall": wall, "last_build": builds[-1] if builds else float("nan"), "returncode": process.returncode}
    (args.out / f"{name}.json").write_text(json.dumps(summary))


def recorded(name: str, args: argparse.Namespace) -> Run:
    """A run as its summary and results log in --out keep it."""
    summary = json.loads((args.out / f"{name}.json").read_text())
    log = args.out / name / "results.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return Run(name, summary["wall"], summary["last_build"],
               {(r["problem"], r["candidate"]): r for r in records}, summary["returncode"])


def environment() -> dict:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}


def cores(node: int, per_node: int) -> str:
    return f"{node * per_node}-{(node + 1) * per_node - 1}"


def start_cluster(args: argparse.Namespace):
    """The GPU node and the GPU-less ones, each a raylet on its cores: a raylet and the workers it
    starts inherit the affinity and CUDA_VISIBLE_DEVICES of this process as it starts them."""
    from ray.cluster_utils import Cluster

    whole, visible = os.sched_getaffinity(0), os.environ.get("CUDA_VISIBLE_DEVICES")
    cluster = Cluster()
    try:
        for node in range(args.build_nodes + 1):
            os.sched_setaffinity(0, range(node * args.cores_per_node, (node + 1) * args.cores_per_node))
            os.environ["CUDA_VISIBLE_DEVICES"] = str(args.gpu) if node == 0 else ""
            cluster.add_node(num_cpus=args.cores_per_node, num_gpus=1 if node == 0 else 0,
                             object_store_memory=args.object_store_gb << 30)
    finally:
        os.sched_setaffinity(0, whole)
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    cluster.wait_for_nodes()
    return cluster


def compare(alone: Run, farm: Run) -> list[str]:
    """What a person reads: the figures and every verdict that differs."""
    differ = [f"  {key[0]} {key[1]}: {alone.records.get(key, {}).get('verdict')} alone, "
              f"{farm.records.get(key, {}).get('verdict')} on the cluster"
              for key in sorted(set(alone.records) | set(farm.records))
              if alone.records.get(key, {}).get("verdict") != farm.records.get(key, {}).get("verdict")]
    verdicts: dict[str, int] = {}
    for record in farm.records.values():
        verdicts[record["verdict"]] = verdicts.get(record["verdict"], 0) + 1
    wrong = [r for r in farm.records.values() if int(str(r["sample"])) % WRONG_EVERY == WRONG_EVERY - 1]
    hosts: dict[str, int] = {}
    for record in farm.records.values():
        hosts[record.get("built_on", "")] = hosts.get(record.get("built_on", ""), 0) + 1
    return [f"\n{'run':<8} {'wall s':>8} {'last build s':>13} {'records':>8} {'exit':>5}",
            *(f"{run.name:<8} {run.wall:>8.1f} {run.last_build:>13.1f} {len(run.records):>8} {run.returncode:>5}"
              for run in (alone, farm)),
            f"builds {alone.last_build / farm.last_build:.2f}x faster on the cluster (goal 3x); "
            f"wall {alone.wall / farm.wall:.2f}x",
            f"verdicts on the cluster {json.dumps(verdicts)}; wrong on purpose and yet correct: "
            f"{sum(r['verdict'] == 'correct' for r in wrong)} of {len(wrong)}",
            f"every verdict the same: {'yes' if not differ and alone.records else 'no'}", *differ,
            "built on: " + ", ".join(f"{host or '(none)'} {n}" for host, n in sorted(hosts.items()))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=50, help="candidates (default 50)")
    parser.add_argument("--out", type=Path, default=Path("build-farm"), help="where everything goes")
    parser.add_argument("--build-nodes", type=int, default=3, help="GPU-less nodes (default 3)")
    parser.add_argument("--cores-per-node", type=int, default=16, help="cores of each node (default 16)")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU node's GPU (default 0)")
    parser.add_argument("--time-cap", default="0.5", help="harness sweep --time-cap (default 0.5)")
    parser.add_argument("--shape", default="4096x4096", help="the problems' inputs, ROWSxCOLS")
    parser.add_argument("--object-store-gb", type=int, default=4, help="each node's Ray object store")
    parser.add_argument("--runs", default="alone,ray",
                        help="which runs to make now (default both); the other is read from --out")
    args = parser.parse_args()
    if set(args.runs.split(",")) - {"alone", "ray"}:
        parser.error(f"--runs {args.runs}: name alone, ray or both (alone,ray)")
    args.out = args.out.absolute()
    rows, cols = (int(v) for v in args.shape.split("x"))
    shutil.rmtree(args.out / "problems", ignore_errors=True)
    shutil.rmtree(args.out / "candidates", ignore_errors=True)
    problems = write_problems(args.out / "problems", rows, cols)
    written = write_candidates(problems, args.out / "candidates", args.n)
    print(f"{len(written)} candidates in {args.out / 'candidates'} for {problems}", flush=True)
    subprocess.run(["taskset", "-c", cores(0, args.cores_per_node), sys.executable, "-m", "harness", "doctor",
                    "--prepare"], env=environment(), check=False)
    runs = args.runs.split(",")
    if "alone" in runs:
        sweep("alone", args, problems, args.out / "candidates")
    if "ray" in runs:
        cluster = start_cluster(args)
        try:
            sweep("ray", args, problems, args.out / "candidates", "--ray", cluster.address)
        finally:
            cluster.shutdown()
    missing = [name for name in ("alone", "ray") if not (args.out / f"{name}.json").is_file()]
    if missing:
        print(f"no comparison yet: make the {' and '.join(missing)} run (--runs) with this --out")
        return 0
    alone, farm = recorded("alone", args), recorded("ray", args)
    print("\n".join(compare(alone, farm)))
    return alone.returncode or farm.returncode


if __name__ == "__main__":
    sys.exit(main())
