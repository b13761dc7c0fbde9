"""`harness build PROBLEM CANDIDATE`: build a candidate without running it, on any machine with its compilers."""
from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from rich.console import Console

from ..engine.building.alone import DEFAULT_ARCH, BuildAlone, build_alone
from ..results import to_json

HELP = "build a candidate without running it (a GPU is not needed): its compile errors, seconds and headers"
DESCRIPTION = ("Build a candidate as an evaluation would (the static check, then its load_inline calls in a build "
               "child), and run nothing: on any machine with the compilers, a GPU or not. Where torch has no CUDA, "
               "CUDA sources are compiled with the CUDA toolkit found (nvcc on PATH, or CUDA_HOME) and linked "
               "against stand-ins for torch's CUDA libraries, not loaded. Prints the compiler's first errors as "
               "`harness eval` does, the build's seconds and the torch headers used (lean: the sources' umbrella "
               "includes replaced by the per-operator headers their code uses; full: as written). The build lands in "
               "the cache. Exit 0 where it built, 1 where it did not.")


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", help="problem file (KernelBench format)")
    p.add_argument("candidate", help="candidate file defining ModelNew")
    p.add_argument("--arch", default=None, metavar="X.Y",
                   help=f"the GPU compute capability to build for (default: this machine's GPU; without one "
                        f"{DEFAULT_ARCH} for a candidate with CUDA sources)")
    p.add_argument("--cache-dir", type=Path, default=None, help="build cache (default ~/.cache/harness)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the result as JSON")


def build_text(result: BuildAlone) -> str:
    """What `harness build` prints: built or not, the seconds and headers, and why it failed."""
    build = result.build
    headers = {"lean": "lean torch headers", "full": "torch headers as written"}.get(
        result.headers.value if result.headers else "", "no C++ or CUDA built")
    own = ("cached" if build.cached else f"the build {build.seconds:.1f} s") if build else "no build"
    where = "" if result.arch == "cpu" else f" for arch {result.arch}"
    if not result.ok:
        return (f"{result.candidate} did not build{where} ({result.verdict.value if result.verdict else 'failed'}; "
                f"{result.seconds:.1f} s, {own}; {headers}).\n{result.explanation}")
    said = f"{result.candidate} built{where} in {result.seconds:.1f} s ({own}; {headers})."
    if result.compiled_only:
        said += ("\nIts CUDA extensions were compiled and linked against stand-ins for torch's CUDA libraries, "
                 "not loaded: this machine's torch has no CUDA.")
    return said


def build_main(args: argparse.Namespace, console: Console) -> int:
    result = build_alone(args.problem, args.candidate, args.arch, args.cache_dir)
    partial(console.print, markup=False, highlight=False, soft_wrap=True)(build_text(result))
    if args.json:
        args.json.write_text(to_json(result))
    return 0 if result.ok else 1
