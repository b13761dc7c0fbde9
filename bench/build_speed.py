"""Build time of the four load_inline idioms, their verdicts on layernorm_4d, and
the wall time of K quick-idiom candidates through the pool; or, with --phases, where a
KernelBench-style build's seconds go.

    PYTHONPATH=$PWD python bench/build_speed.py [--device cuda] [--cache-dir DIR] [-k 8]
                                                [--gpus 0,1] [--time-cap 5] [--json OUT]
    PYTHONPATH=$PWD python bench/build_speed.py --phases [--arch 9.0] [--cuda-home DIR]

--phases needs no GPU: it builds one KernelBench-style candidate (bench/build_ahead.py's
ReLU, `#include <torch/extension.h>` inside its .cu) through load_inline (on a CPU-only
torch against stand-ins for torch's CUDA libraries, as bench/idioms/cpu_build.py does),
then runs each step of the build.ninja torch wrote on its own: the binding (main.cpp,
g++), the .cu (nvcc, its own passes from `nvcc --time`), the link, and on a GPU host the
import. Each step with wall seconds, CPU seconds (user + system, children included) and
peak resident memory; then the binding once more against torch's precompiled header
(made as load_inline(use_pch=True) makes it, in a directory of the run's own), which g++
takes for main.cpp by itself wherever the header is ready.

The candidates come from bench/idioms/generate.py: one LayerNorm, four ways to build
it (seed, quick, pybind, ctypes). Every run starts from a fresh cache directory.

The order of the steps matters because load_inline deletes torch's precompiled
header whenever it is called without use_pch=True, as the seed, pybind and ctypes
idioms are, at build and again when the worker imports them:
1. cold builds: seed, pybind and ctypes side by side; once all three are past
   that deletion, quick (the header's state is noted: when missing, this build
   pays for it), then a second quick source with the header ready, while the
   seed build finishes; then a cached build of each;
2. quick's evaluation, then K quick variants (threads per block differ) through
   harness.engine.pool.evaluate_batch: builds in parallel, check and timing per GPU;
3. the evaluations of pybind, ctypes and seed.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "idioms"))
sys.path.insert(0, str(ROOT / "bench"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from generate import candidate_source, write_idioms, write_quick_variants  # noqa: E402
from harness.engine.building import cache as builds  # noqa: E402
from harness.engine.building.pch import pch_status  # noqa: E402
from harness.engine.options import default_cache_dir  # noqa: E402
from harness.engine.doctor import diagnose  # noqa: E402
from harness import EvalOptions, EvalResult, Evaluator, ProblemError, evaluate_batch, to_dict  # noqa: E402
from harness.engine.building.builder import Built  # noqa: E402
from harness.engine.processes.cores import default_build_jobs  # noqa: E402

PROBLEM = ROOT / "problems" / "layernorm_4d.py"
IDIOM_THREADS = 256
QUICK_READY_THREADS = 512  # the second quick source, built once the header is ready
VARIANT_THREADS = [t for t in range(64, 1025, 32) if t not in (IDIOM_THREADS, QUICK_READY_THREADS)]
STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", flush=True)


def build_record(built: Built, wall: float, pch_before: str, alongside: str) -> dict:
    b = built.result.build
    return {"ok": not built.failed, "seconds": b.seconds if b else None, "cached": bool(b and b.cached),
            "wall": wall, "pch_before": pch_before, "alongside": alongside,
            "error": "" if not built.failed else built.result.explanation[:2000]}


def timed_build(evaluator: Evaluator, path: Path) -> tuple[Built, float]:
    started = time.monotonic()
    built = evaluator.build(path)
    return built, time.monotonic() - started


def past_pch_deletion(evaluator: Evaluator, path: Path, future: Future, limit: float = 120.0) -> None:
    """Wait until the build of `path` has called load_inline: it writes main.cpp
    into its build directory right after deleting the precompiled header."""
    ext = builds.BuildEntry(evaluator.cache, path.read_text(), evaluator.arch).dir / "ext"
    deadline = time.monotonic() + limit
    while not future.done() and not any(ext.glob("*/main.cpp")) and time.monotonic() < deadline:
        time.sleep(0.2)


def eval_record(result: EvalResult) -> dict:
    record = {"verdict": result.verdict.value, "speedup": result.speedup,
              "phase_seconds": result.phase_seconds, "seconds": result.seconds}
    for name in ("candidate", "reference"):
        timing = result.timings.get(name)
        record[f"{name}_ms"] = timing.median if timing else None
    if not result.ok:
        record["explanation"] = result.explanation[:2000]
    return record


def cold_and_cached_builds(evaluator: Evaluator, paths: dict[str, Path], quick_ready: Path) -> tuple[dict, dict]:
    """Part 1. Returns build records and the cached Built of each idiom, to evaluate later."""
    records: dict[str, dict] = {}
    pool = ThreadPoolExecutor(max_workers=3)
    pch_start = pch_status()
    log(f"cold builds of seed, pybind and ctypes, side by side (precompiled header: {pch_start})")
    futures = {idiom: pool.submit(timed_build, evaluator, paths[idiom]) for idiom in ("seed", "pybind", "ctypes")}
    for idiom in ("pybind", "ctypes"):
        built, wall = futures[idiom].result()
        records[idiom] = build_record(built, wall, pch_start, "seed, pybind, ctypes")
        log(f"{idiom}: cold build {'ok' if records[idiom]['ok'] else 'FAILED'} in {wall:.1f} s")
    past_pch_deletion(evaluator, paths["seed"], futures["seed"])
    for name, path in (("quick", paths["quick"]), ("quick, header ready", quick_ready)):
        pch, alongside = pch_status(), "" if futures["seed"].done() else "seed"
        log(f"{name}: cold build (precompiled header: {pch})" + (" while the seed build runs" if alongside else ""))
        built, wall = timed_build(evaluator, path)
        records[name] = build_record(built, wall, pch, alongside)
        log(f"{name}: cold build {'ok' if records[name]['ok'] else 'FAILED'} in {wall:.1f} s")
    built, wall = futures["seed"].result()
    records["seed"] = build_record(built, wall, pch_start, "pybind, ctypes, quick")
    log(f"seed: cold build {'ok' if records['seed']['ok'] else 'FAILED'} in {wall:.1f} s")
    pool.shutdown()
    records = {name: records[name] for name in ("seed", "quick", "quick, header ready", "pybind", "ctypes")}
    cached = {}
    for idiom, path in paths.items():
        if not records[idiom]["ok"]:
            continue  # a failed build would only fail again, as slowly
        cached[idiom], wall = timed_build(evaluator, path)
        b = cached[idiom].result.build
        records[idiom]["cached_call"] = {"wall": wall, "seconds": b.seconds if b else None,
                                         "cached": bool(b and b.cached)}
        log(f"{idiom}: second build call {wall * 1000:.0f} ms, cached={bool(b and b.cached)}")
    return records, cached


def evaluate_idiom(evaluator: Evaluator, idiom: str, built: Built | None, evals: dict, raw: dict) -> None:
    if built is None:
        evals[idiom] = {"skipped": "build failed"}
        return
    log(f"{idiom}: evaluating (worker start, check, time)")
    result = evaluator.run(built)
    evals[idiom], raw[idiom] = eval_record(result), to_dict(result)
    evals[idiom]["pch_after"] = pch_status()
    log(f"{idiom}: {result.explanation.splitlines()[0][:200]}")


def run_pool(evaluator: Evaluator, variants: list[Path], threads: list[int], options: EvalOptions,
             gpus: list[int] | None) -> tuple[dict, list]:
    """Part 2b: K different quick candidates through the pool."""
    seen: dict[int, dict[str, float]] = {}

    def on_event(index: int, phase: str) -> None:
        seen.setdefault(index, {})[phase] = time.monotonic() - started
        log(f"pool #{index} ({threads[index]} threads): {phase}")

    log(f"pool: {len(variants)} quick candidates, {default_build_jobs()} builds at once, "
        f"timing on GPU(s) {gpus or 'of --device'}")
    started = time.monotonic()
    results = evaluate_batch(evaluator.problem, variants, options, gpus, on_event=on_event)
    wall = time.monotonic() - started
    rows = []
    for i, r in enumerate(results):
        row = eval_record(r)
        row.update(threads=threads[i], build_seconds=r.build.seconds if r.build else None,
                   build_started=seen.get(i, {}).get("building"))
        rows.append(row)
    built_by = [row["build_started"] + row["build_seconds"] for row in rows
                if row["build_started"] is not None and row["build_seconds"] is not None]
    gpu_busy = sum(sum(row["phase_seconds"].get(p, 0.0) for p in ("start", "check", "time")) for row in rows)
    summary = {"k": len(variants), "wall": wall, "builds_done_at": max(built_by) if built_by else None,
               "gpu_phases_sum": gpu_busy, "build_jobs": default_build_jobs(),
               "correct": sum(r.ok for r in results), "candidates": rows}
    log(f"pool: {summary['correct']}/{len(variants)} correct in {wall:.1f} s wall")
    return summary, [to_dict(r) for r in results]


def seconds(value) -> str:
    return "" if value is None else f"{value:.1f}"


def milliseconds(value) -> str:
    return "" if value is None else f"{value:.4g}"


def print_tables(console: Console, report: dict) -> None:
    table = Table(title="1. Builds, fresh cache (Evaluator.build)", title_justify="left")
    for column in ("idiom", "cold s", "header before", "built alongside", "2nd call", "2nd call ms"):
        table.add_column(column, justify="left" if column in ("idiom", "built alongside") else "right")
    for idiom, r in report["builds"].items():
        cached = r.get("cached_call", {})
        table.add_row(idiom, seconds(r["seconds"]) if r["ok"] else "[red]failed[/red]", r["pch_before"],
                      r["alongside"], "cached" if cached.get("cached") else ("rebuilt" if cached else ""),
                      f"{cached['wall'] * 1000:.0f}" if cached else "")
    console.print(table)
    table = Table(title="2. Evaluation on layernorm_4d (Evaluator.run)", title_justify="left")
    for column in ("idiom", "verdict", "cand ms", "ref ms", "speedup", "start s", "check s", "time s",
                   "header after"):
        table.add_column(column, justify="left" if column in ("idiom", "verdict") else "right")
    for idiom, r in report["evals"].items():
        phases = r.get("phase_seconds", {})
        table.add_row(idiom, r.get("verdict", r.get("skipped", "")), milliseconds(r.get("candidate_ms")),
                      milliseconds(r.get("reference_ms")), f"{r['speedup']:.2f}x" if r.get("speedup") else "",
                      seconds(phases.get("start")), seconds(phases.get("check")), seconds(phases.get("time")),
                      r.get("pch_after", ""))
    console.print(table)
    pool = report.get("pool")
    if not pool:
        return
    table = Table(title=f"3. Pool: {pool['k']} quick candidates (harness.engine.pool.evaluate_batch)", title_justify="left")
    for column in ("#", "threads", "verdict", "build s", "start s", "check s", "time s", "cand ms"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
    for i, r in enumerate(pool["candidates"]):
        phases = r["phase_seconds"]
        table.add_row(str(i), str(r["threads"]), r["verdict"], seconds(r["build_seconds"]),
                      seconds(phases.get("start")), seconds(phases.get("check")), seconds(phases.get("time")),
                      milliseconds(r.get("candidate_ms")))
    console.print(table)
    console.print(f"Pool: wall {pool['wall']:.1f} s; builds done by {seconds(pool['builds_done_at'])} s; "
                  f"GPU phases (start+check+time) sum {pool['gpu_phases_sum']:.1f} s; "
                  f"{pool['build_jobs']} builds at once; {pool['correct']}/{pool['k']} correct.")


def print_failures(console: Console, report: dict) -> None:
    """Why anything failed, first lines only (the JSON has the rest)."""
    failures = [(f"build of {name}", r["error"]) for name, r in report["builds"].items() if not r["ok"]]
    failures += [(f"evaluation of {name}", r["explanation"]) for name, r in report["evals"].items()
                 if r.get("explanation")]
    failures += [(f"pool #{i}", r["explanation"]) for i, r in enumerate(report.get("pool", {}).get("candidates", []))
                 if r.get("explanation")]
    for what, explanation in failures:
        console.print(f"[red]{what}:[/red] {explanation[:600]}")


@dataclass
class Step:
    name: str
    wall: float
    cpu: float
    peak_mb: float
    ok: bool = True


def run_step(name: str, command: list[str], env: Optional[dict] = None, cwd: Optional[Path] = None) -> Step:
    """One command, with its wall seconds and, from wait4, its CPU seconds and peak memory
    (the largest of it and the children it waited for)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        log(f"{name}: exit {proc.returncode}: {error[-800:]}")
    return Step(name, time.monotonic() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                proc.returncode == 0)


def nvcc_passes(csv_path: Path) -> list[Step]:
    """nvcc --time's rows: each pass (cudafe++, cicc, ptxas, the host gcc...) with its milliseconds."""
    rows = []
    if csv_path.is_file():
        for row in csv.reader(csv_path.read_text().splitlines()):
            # source file, phase name, inputs, output, arch, tool, metric (ms), unit
            if len(row) >= 7 and row[0].strip() and row[0].strip() != "source file name":
                try:
                    rows.append(Step(f"  .cu: {row[1].strip()}", float(row[6]) / 1000, float("nan"), float("nan")))
                except ValueError:
                    continue
    return rows


def build_phases(arch: str, cuda_home: str, console: Console) -> int:
    """--phases: see the module's docstring."""
    import torch
    from build_ahead import candidate
    from cpu_build import DRIVER, stand_ins

    work = Path(tempfile.mkdtemp(prefix="build-phases-"))
    path = work / "kb_relu.py"
    path.write_text(candidate("19", 0))
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(work / "ext"), "TORCH_CUDA_ARCH_LIST": arch}
    gpu_torch = torch.backends.cuda.is_built()
    if not gpu_torch:  # the CUDA libraries a CPU-only torch lacks, as empty stand-ins
        helpers = stand_ins(work / "stand-ins")
        env.update(LIBRARY_PATH=str(helpers), CPLUS_INCLUDE_PATH=str(helpers / "include"),
                   LD_LIBRARY_PATH=os.pathsep.join([str(helpers), str(Path(cuda_home) / "lib64")]))
    log(f"load_inline of {path.name}, whole ({'CUDA' if gpu_torch else 'CPU-only'} torch, arch {arch})")
    steps = [run_step("load_inline, whole build", [sys.executable, "-c", DRIVER, str(path), cuda_home], env)]
    ninja = next((work / "ext").glob("*/build.ninja"), None)
    if ninja is None:
        console.print(f"[red]load_inline wrote no build.ninja under {work / 'ext'}.[/red]")
        return 1
    build = ninja.parent
    flags = dict(re.findall(r"^(\w+) = (.*)$", ninja.read_text(), re.MULTILINE))
    cxx, cflags = flags["cxx"], shlex.split(flags["cflags"])
    scratch = work / "steps"
    scratch.mkdir()
    binding = [cxx, *cflags, "-c", str(build / "main.cpp"), "-o", str(scratch / "main.o")]
    log("the binding, main.cpp, alone")
    steps.append(run_step("binding main.cpp (g++)", binding, env))
    log("the .cu, alone, with nvcc --time")
    times = scratch / "nvcc-time.csv"
    steps.append(run_step(".cu (nvcc, all passes)", [flags["nvcc"], *shlex.split(flags["cuda_cflags"]), "--time",
                                                    str(times), "-c", str(build / "cuda.cu"), "-o",
                                                    str(scratch / "cuda.o")], env))
    steps += nvcc_passes(times)
    steps.append(run_step("link", [cxx, str(scratch / "main.o"), str(scratch / "cuda.o"),
                                   *shlex.split(flags["ldflags"]), "-o", str(scratch / "ext.so")], env))
    if gpu_torch and torch.cuda.is_available():
        load = ("import importlib.util, sys, torch; s = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1]); "
                "importlib.util.module_from_spec(s)")
        base = run_step("python, import torch", [sys.executable, "-c", "import torch"], env)
        loaded = run_step("python, import torch + the .so", [sys.executable, "-c", load.replace(
            "importlib.util.module_from_spec(s)", "s.loader.exec_module(importlib.util.module_from_spec(s))"),
            next(build.glob("*.so")).as_posix(), next(build.glob("*.so")).stem], env)
        steps.append(Step("import of the .so", loaded.wall - base.wall, loaded.cpu - base.cpu, loaded.peak_mb))
    # torch's precompiled header, made as load_inline(use_pch=True) makes it but in a directory of
    # this run's (torch's own stays as it is): g++ looks for torch/extension.h.gch in each include
    # directory before the header, so -I there first gives main.cpp the one built here
    include = Path(torch.__file__).parent / "include"
    header = work / "pch" / "torch" / "extension.h.gch"
    header.parent.mkdir(parents=True)
    log("torch's precompiled header, made once per torch install")
    steps.append(run_step("precompiled header, once", [
        cxx, "-x", "c++-header", str(include / "torch" / "extension.h"), "-o", str(header), "-I", str(include),
        "-I", sysconfig.get_path("include"), "-I", str(include / "torch" / "csrc" / "api" / "include"),
        "-DTORCH_API_INCLUDE_EXTENSION_H", "-std=c++20", "-fPIC"], env))
    log("the binding again, against the precompiled header")
    steps.append(run_step("binding main.cpp, header precompiled",
                          [cxx, "-I", str(header.parent.parent), "-Winvalid-pch", *binding[1:]], env))
    table = Table(title=f"Where a KernelBench-style build's seconds go ({os.cpu_count()} CPUs, arch {arch})",
                  title_justify="left")
    for column in ("step", "wall s", "CPU s", "peak MB"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step in steps:
        table.add_row(step.name if step.ok else f"[red]{step.name} (failed)[/red]", f"{step.wall:.1f}",
                      "" if step.cpu != step.cpu else f"{step.cpu:.1f}",
                      "" if step.peak_mb != step.peak_mb else f"{step.peak_mb:.0f}")
    console.print(table)
    console.print(f"Build directory: {build}")
    return 0 if all(step.ok for step in steps) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="the candidates are CUDA: cuda or cuda:N")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="where the fresh cache goes (a new folder inside; default: inside the harness cache)")
    parser.add_argument("-k", type=int, default=8, help="quick candidates through the pool")
    parser.add_argument("--gpus", default=None, metavar="0,1", help="GPUs the pool times on (default: --device)")
    parser.add_argument("--time-cap", type=float, default=5.0, metavar="S",
                        help="most seconds of timing per candidate (harness eval's default is 10)")
    parser.add_argument("--budget", type=float, default=390.0, metavar="S",
                        help="skip the last evaluations once this many seconds have passed")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every figure as JSON")
    parser.add_argument("--phases", action="store_true",
                        help="instead, where one KernelBench-style build's seconds go, step by step (no GPU needed)")
    parser.add_argument("--arch", default=None, help="with --phases: TORCH_CUDA_ARCH_LIST (default: this GPU's, or 9.0)")
    parser.add_argument("--cuda-home", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                        help="with --phases: the CUDA toolkit (default $CUDA_HOME or /usr/local/cuda)")
    args = parser.parse_args()
    console = Console(width=140)
    if args.phases:
        from harness.device import gpu_arch

        arch = args.arch or next((a for a in [gpu_arch(args.device)] if a not in ("cpu", "unknown")), "9.0")
        return build_phases(arch, args.cuda_home, console)
    if not 1 <= args.k <= len(VARIANT_THREADS):
        console.print(f"-k must be between 1 and {len(VARIANT_THREADS)}: the variants differ in threads per block.")
        return 2
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    base = args.cache_dir or default_cache_dir()
    run_dir = Path(base) / f"build-speed-{time.strftime('%Y%m%dT%H%M%S')}"
    diagnosis = diagnose(args.device, run_dir / "cache")
    if not diagnosis.ok:
        missing = "; ".join(f"{c.name}: {c.found} ({c.fix})" for c in diagnosis.checks if c.needed and not c.ok)
        console.print(f"[red]This machine is not ready for --device {args.device}: {missing}[/red]")
        return 2
    paths = write_idioms(run_dir / "candidates", IDIOM_THREADS)
    quick_ready = run_dir / "candidates" / f"quick_t{QUICK_READY_THREADS}.py"
    quick_ready.write_text(candidate_source("quick", QUICK_READY_THREADS))
    variants = write_quick_variants(run_dir / "variants", VARIANT_THREADS[:args.k])
    options = EvalOptions(device=args.device, cache_dir=run_dir / "cache", time_cap=args.time_cap,
                          build_timeout=300, run_timeout=180)
    log(f"fresh cache {options.cache_dir}; {', '.join(g.name for g in diagnosis.gpus) or 'no GPU'}; "
        f"{os.cpu_count()} CPUs; time cap {args.time_cap} s")
    report: dict = {"settings": {"device": args.device, "k": args.k, "gpus": gpus, "time_cap": args.time_cap,
                                 "cache": str(options.cache_dir)},
                    "machine": {**to_dict(diagnosis), "cpus": os.cpu_count()},
                    "pch_at_start": diagnosis.pch, "builds": {}, "evals": {}}
    raw: dict = {}
    try:
        with Evaluator(PROBLEM, options) as evaluator:
            report["builds"], cached = cold_and_cached_builds(evaluator, paths, quick_ready)
            evaluate_idiom(evaluator, "quick", cached.get("quick"), report["evals"], raw)
            report["pool"], raw["pool"] = run_pool(evaluator, variants, VARIANT_THREADS[:args.k], options, gpus)
            for idiom in ("pybind", "ctypes", "seed"):
                if time.monotonic() - STARTED > args.budget:
                    report["evals"][idiom] = {"skipped": f"skipped: past the {args.budget:.0f} s budget"}
                    log(f"{idiom}: evaluation skipped (past the budget)")
                    continue
                evaluate_idiom(evaluator, idiom, cached.get(idiom), report["evals"], raw)
    except ProblemError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    report["pch_at_end"] = pch_status()
    report["total_seconds"] = time.monotonic() - STARTED
    print_tables(console, report)
    print_failures(console, report)
    console.print(f"Precompiled header: {report['pch_at_start']} at the start, {report['pch_at_end']} at the end. "
                  f"Total {report['total_seconds']:.0f} s.")
    if args.json:
        args.json.write_text(json.dumps({**report, "raw": raw}, indent=2, default=str))
        console.print(f"Figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
