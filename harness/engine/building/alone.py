"""A build alone (`harness build`): a candidate's static check and build, as an evaluation does them,
and nothing run. It needs a compiler, not a GPU: with a GPU it builds for that GPU and loads the
extensions; without one it builds for the arch given, and where torch has no CUDA its CUDA extensions
are compiled and linked against stand-ins, not loaded (nogpu.py). Its build lands in the cache, so a
later evaluation of the same file on a machine like this one finds it built."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...device import cuda_present, gpu_arch
from ...errors import HarnessError
from ...problem import load_problem
from ...results import BuildResult, Headers, Verdict
from ...torch_install import torch_cuda
from ..options import EvalOptions
from ..phases import Notify
from .builder import Builder
from .nogpu import compiles_only, cuda_home

# The arch a CUDA candidate is built for where no GPU says (an H100's).
DEFAULT_ARCH = "9.0"


@dataclass
class BuildAlone:
    """One candidate built alone: `ok` where it built (and imported, where it could be loaded here)."""

    problem: str
    candidate: str
    arch: str
    ok: bool
    seconds: float  # wall: the problem's load, the static check and the build
    headers: Optional[Headers]  # None where nothing was built (no C++ or CUDA)
    compiled_only: bool = False  # its CUDA extensions compiled and linked against stand-ins, not loaded
    verdict: Optional[Verdict] = None  # where it failed: compile_error, import_error, rejected, ...
    explanation: str = ""  # where it failed: why, with the compiler's first errors
    build: Optional[BuildResult] = None


def default_arch(source: str) -> str:
    """This machine's GPU's arch; without a GPU, DEFAULT_ARCH for a candidate with CUDA sources, else "cpu"."""
    if cuda_present():
        return gpu_arch("cuda")
    return DEFAULT_ARCH if "cuda_sources" in source else "cpu"


def build_alone(problem: str | Path, candidate: str | Path, arch: Optional[str] = None,
                cache_dir: Optional[Path] = None, on_phase: Optional[Notify] = None) -> BuildAlone:
    started = time.monotonic()
    path = Path(candidate)
    if not path.is_file():
        raise HarnessError(f"Candidate file {path} does not exist or is not a file.")
    source = path.read_text(errors="replace")
    arch = arch or default_arch(source)
    if arch != "cpu" and "cuda_sources" in source and torch_cuda() is None and cuda_home() is None:
        raise HarnessError(f"Candidate file {path} has CUDA sources, and neither this torch (built without CUDA) "
                           "nor the machine has a CUDA toolkit to compile them: install one (nvcc on PATH, or "
                           "CUDA_HOME naming its folder).")
    options = EvalOptions(device="cuda" if cuda_present() else "cpu", cache_dir=cache_dir)
    built = Builder(load_problem(problem), options, arch=arch).build(path, on_phase)
    result, entry = built.result, built.entry
    build = result.build
    ok = not built.failed
    compiled_only = bool(ok and entry and compiles_only(arch) and build and any(
        (entry.extensions / key / "cuda.cu").exists() for key in build.extensions))
    return BuildAlone(str(problem), str(path), arch, ok, time.monotonic() - started, build.headers if build else None,
                      compiled_only, None if ok else result.verdict, "" if ok else result.explanation, build)
