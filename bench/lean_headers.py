"""How many KernelBench-style candidates build with lean torch headers, and how long their builds take
lean against the same .cu compiled with its headers as written.

    PYTHONPATH=$PWD python bench/lean_headers.py ../shared/kernelbench [--candidates bench/lean_candidates]
                                                 [--arch 9.0] [--only relu,softmax] [--out FILE.json]

Each file in the candidates folder names its problem on its first line (`# problem: level1/19_ReLU.py`,
under the KernelBench folder given) and keeps its CUDA source in a module-level `cuda_source` literal.
For each, in an empty cache: `harness build` (engine.building.alone.build_alone), with its own seconds
and ninja's for each compile (.ninja_log); then the candidate's .cu as load_inline writes it without the
harness (torch/types.h, cuda.h, cuda_runtime.h, then the source), compiled alone by nvcc with the flags
the build's build.ninja gave, the full headers' seconds. Candidates run one after another, so no two
compiles share the cores. On a machine whose torch has no CUDA the builds compile and link, not load
(engine/building/nogpu.py).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.engine.building.alone import build_alone
from harness.engine.building.headers import read_choice
from harness.engine.building.nogpu import compile_only_env, compiles_only, cuda_home


@dataclass
class Measured:
    name: str
    problem: str
    ok: bool
    headers: str
    build_s: float  # harness build's build step, its child's start to its end
    lean_cu_s: float  # ninja's seconds for cuda.cuda.o in that build (as written where it fell back)
    main_s: float  # ninja's seconds for main.o in that build
    full_cu_s: float  # nvcc alone on the .cu with its headers as written
    why_full: str = ""  # where built as written: why
    lean_errors: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.lean_cu_s / self.full_cu_s if self.full_cu_s else float("nan")


def cuda_source(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "cuda_source" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{path} has no module-level cuda_source literal")


def ninja_seconds(extension: Path) -> dict[str, float]:
    """Each output's seconds in the build's last ninja run (.ninja_log: start and end in ms)."""
    found = {}
    for line in (extension / ".ninja_log").read_text().splitlines()[1:]:
        start, end, _, output, _ = line.split("\t")
        found[output] = (int(end) - int(start)) / 1000
    return found


def full_cu_seconds(extension: Path, source: str, cache: Path, arch: str) -> float:
    flags = dict(line.split(" = ", 1) for line in (extension / "build.ninja").read_text().splitlines() if " = " in line)
    cu = cache / "full.cu"
    cu.write_text("\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>", source]))
    env = {**os.environ, **(compile_only_env(cache, cuda_home()) if compiles_only(arch) else {})}
    command = [flags["nvcc"], *shlex.split(flags["cuda_cflags"]), "-c", str(cu), "-o", str(cache / "full.o"),
               *shlex.split(flags.get("cuda_post_cflags", ""))]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"the full .cu of {extension} did not compile:\n{done.stdout}{done.stderr}"[-3000:])
    return time.monotonic() - started


def measure(path: Path, kernelbench: Path, arch: str, work: Path) -> Measured:
    problem = path.read_text().splitlines()[0].removeprefix("# problem:").strip()
    cache = work / path.stem
    built = build_alone(kernelbench / problem, path, arch, cache)
    if not built.ok:
        return Measured(path.stem, problem, False, str(built.headers and built.headers.value), 0, 0, 0, 0,
                        built.explanation[:500])
    [key] = built.build.extensions
    extension = cache / "extensions" / key
    choice = read_choice(extension)
    steps = ninja_seconds(extension)
    return Measured(path.stem, problem, True, built.headers.value, built.build.seconds, steps.get("cuda.cuda.o", 0.0),
                    steps.get("main.o", 0.0), full_cu_seconds(extension, cuda_source(path), cache, arch),
                    "" if choice.headers.value == "lean" else choice.reason, choice.lean_errors)


def table(rows: list[Measured]) -> str:
    lines = ["| candidate | problem | headers | build s | .cu lean s | main.cpp s | .cu full s | .cu lean/full |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.name} | {r.problem} | {r.headers if r.ok else 'FAILED'} | {r.build_s:.1f} | "
                     f"{r.lean_cu_s:.1f} | {r.main_s:.1f} | {r.full_cu_s:.1f} | {r.share:.2f} |")
    done = [r for r in rows if r.ok]
    lean = [r for r in done if r.headers == "lean"]
    lines += ["", f"built lean: {len(lean)} of {len(rows)}"]
    if done:
        lines.append(f"median: build {statistics.median(r.build_s for r in done):.1f} s, .cu lean "
                     f"{statistics.median(r.lean_cu_s for r in done):.1f} s, .cu full "
                     f"{statistics.median(r.full_cu_s for r in done):.1f} s, lean/full "
                     f"{statistics.median(r.share for r in done):.2f}")
    lines += [f"{r.name}: built as written: {r.why_full}" + (f" ({'; '.join(r.lean_errors[:2])})" if r.lean_errors
                                                             else "") for r in rows if r.why_full]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernelbench", type=Path, help="the KernelBench folder (holding level1/, level2/)")
    parser.add_argument("--candidates", type=Path, default=Path(__file__).parent / "lean_candidates")
    parser.add_argument("--arch", default="9.0", help="the compute capability to build for (default 9.0)")
    parser.add_argument("--only", default="", help="these candidates alone, by file stem, comma-separated")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    if cuda_home() is None:
        print("No CUDA toolkit found (nvcc on PATH, or CUDA_HOME).", file=sys.stderr)
        return 2
    paths = sorted(p for p in args.candidates.glob("*.py")
                   if not args.only or p.stem in args.only.split(","))
    rows = []
    with tempfile.TemporaryDirectory(prefix="lean-headers-") as work:
        for path in paths:
            print(f"{path.stem} ...", flush=True)
            rows.append(measure(path, args.kernelbench, args.arch, Path(work)))
            r = rows[-1]
            print(f"  {r.headers if r.ok else 'FAILED ' + r.why_full}: build {r.build_s:.1f} s, .cu lean "
                  f"{r.lean_cu_s:.1f} s, full {r.full_cu_s:.1f} s", flush=True)
    print(table(rows))
    if args.out:
        args.out.write_text(json.dumps([{**asdict(r), "share": r.share} for r in rows], indent=2))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
