"""Build the idiom candidates through load_inline on a machine without a GPU, and
count the torch headers each compiled source includes.

A CPU-only torch refuses CUDA sources (its CUDA_HOME is None) and has no CUDA
libraries to link against. This points torch at the CUDA toolkit given and links
against empty stand-ins for libc10_cuda and libtorch_cuda (the harness's own,
harness/engine/building/nogpu.py, as `harness build` uses them), so the real
load_inline build (the same ninja file, flags and compilers) runs to the end.
The pybind and ctypes idioms then import for real; the seed and quick idioms
build but cannot load on a CPU torch (their wrappers call into torch's CUDA
library), which is reported as such.

    PYTHONPATH=$PWD python bench/idioms/cpu_build.py [--idioms seed,quick,pybind,ctypes] [--cuda-home /usr/local/cuda]
                                     [--arch 9.0] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from generate import IDIOMS, write_idioms
from harness.engine.building.nogpu import stand_ins

# Runs in a child: import one candidate with torch told where CUDA is.
DRIVER = r"""
import json, runpy, sys
import torch.utils.cpp_extension as cpp_extension
cpp_extension.CUDA_HOME = sys.argv[2]
try:
    names = runpy.run_path(sys.argv[1])
    print(json.dumps({"loaded": isinstance(names.get("ModelNew"), type)}))
except ImportError as exc:
    print(json.dumps({"loaded": False, "load_error": str(exc)}))
"""

TORCH_HEADER_DIRS = re.compile(r"/include/(torch|ATen|c10|caffe2)/")


@dataclass
class IdiomBuild:
    idiom: str
    built: bool
    loaded: bool
    seconds: float
    load_error: str = ""
    error: str = ""
    torch_headers: dict[str, int] = field(default_factory=dict)  # source -> torch headers it includes


def included_torch_headers(build_dir: Path, env: dict) -> dict[str, int]:
    """Per source torch compiled, how many torch/ATen/c10 headers it includes.

    Preprocesses with the exact flags of torch's build.ninja; ninja's own
    dependency records leave out -isystem headers, torch's among them."""
    flags = dict(re.findall(r"^(\w+) = (.*)$", (build_dir / "build.ninja").read_text(), re.MULTILINE))
    counts = {}
    for source, compiler, cflags in (("main.cpp", "cxx", "cflags"), ("cuda.cu", "nvcc", "cuda_cflags")):
        if (build_dir / source).exists():
            out = subprocess.run([flags[compiler], "-M", *shlex.split(flags[cflags]), str(build_dir / source)],
                                 capture_output=True, text=True, env=env)
            if out.returncode == 0:
                counts[source] = len({h for h in out.stdout.split() if TORCH_HEADER_DIRS.search(h)})
    return counts


def build_one(idiom: str, path: Path, work: Path, stand_ins_dir: Path, cuda_home: str, arch: str) -> IdiomBuild:
    ext_dir = work / f"ext-{idiom}"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext_dir), "TORCH_CUDA_ARCH_LIST": arch,
           "LIBRARY_PATH": str(stand_ins_dir), "CPLUS_INCLUDE_PATH": str(stand_ins_dir / "include"),
           "LD_LIBRARY_PATH": os.pathsep.join([str(stand_ins_dir), str(Path(cuda_home) / "lib64")])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(path), cuda_home], env=env, capture_output=True,
                          text=True)
    seconds = time.monotonic() - started
    build_dirs = [d for d in ext_dir.glob("*") if (d / "build.ninja").exists()]
    built = bool(build_dirs) and any(build_dirs[0].glob("*.so"))
    result = IdiomBuild(idiom, built, False, seconds)
    if proc.returncode != 0:
        result.error = (proc.stderr or proc.stdout).strip()[-3000:]
    else:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        result.loaded, result.load_error = report["loaded"], report.get("load_error", "")[:300]
    if build_dirs:
        result.torch_headers = included_torch_headers(build_dirs[0], env)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idioms", default=",".join(IDIOMS))
    parser.add_argument("--cuda-home", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    parser.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST for the build")
    parser.add_argument("--work", type=Path, default=None, help="where candidates and builds go (default: a temp dir)")
    args = parser.parse_args()
    idioms = [i for i in args.idioms.split(",") if i]
    unknown = sorted(set(idioms) - set(IDIOMS))
    if unknown:
        print(f"Unknown idiom(s) {', '.join(unknown)}; choose from {', '.join(IDIOMS)}.", file=sys.stderr)
        return 2
    if not (Path(args.cuda_home) / "bin" / "nvcc").exists():
        print(f"No nvcc at {args.cuda_home}/bin/nvcc; pass --cuda-home with a CUDA toolkit.", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="idioms-cpu-"))
    paths = write_idioms(work / "candidates")
    helpers = stand_ins(work / "stand-ins")
    ok = True
    for idiom in idioms:
        print(f"building {idiom} ...", flush=True)
        r = build_one(idiom, paths[idiom], work, helpers, args.cuda_home, args.arch)
        state = "built" if r.built else "FAILED"
        load = "imported, ModelNew defined" if r.loaded else f"not loadable here ({r.load_error or r.error[-200:]})"
        print(f"  {state} in {r.seconds:.1f} s; {load}")
        for target, count in r.torch_headers.items():
            print(f"  {target}: includes {count} torch/ATen/c10 headers")
        ok &= r.built and (r.loaded or idiom in ("seed", "quick"))
        if not r.built:
            print(r.error)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
