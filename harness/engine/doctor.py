"""`harness doctor`'s findings: can this machine build and time candidates, and how fast?
(cli/doctor.py prints them.)

Each check says what it found and, when something is missing or wrong, how to
fix it. A check is `needed` when the chosen device cannot work without it; the
others (the precompiled header) only cost build time. GPUs are read from
nvidia-smi, so the harness process still never initialises CUDA.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..device import nvidia_smi
from .building import pch
from .options import default_cache_dir


@dataclass
class Gpu:
    index: int
    name: str
    arch: str  # compute capability, "9.0"
    memory: str  # as nvidia-smi gives it, "81559 MiB"
    driver: str


@dataclass
class Check:
    """One finding. `needed`: the device cannot work without it; a failed check
    that is not needed only makes builds slower."""

    name: str
    ok: bool
    needed: bool
    found: str
    fix: str = ""


@dataclass
class Diagnosis:
    device: str
    cache_dir: str
    gpus: list[Gpu] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    cache_bytes: int = 0
    pch: str = ""  # pch.pch_status(): ready, missing, stale or unsupported
    pch_seconds: Optional[float] = None  # spent building it with --prepare

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks if c.needed)

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def _run(args: list[str]) -> str:
    """A tool's output, or "" when it cannot be run."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout + out.stderr if out.returncode == 0 else ""


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def list_gpus() -> list[Gpu]:
    gpus = []
    for line in nvidia_smi("index,name,compute_cap,memory.total,driver_version"):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 5:
            # a name with a comma in it would split: keep the last three fields in place
            gpus.append(Gpu(int(parts[0]) if parts[0].isdigit() else len(gpus), ", ".join(parts[1:-3]),
                            parts[-3], parts[-2], parts[-1]))
    return gpus


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def default_device() -> str:
    torch = _torch()
    return "cuda" if torch is not None and torch.version.cuda and list_gpus() else "cpu"


def check_gpus(gpus: list[Gpu], on_gpu: bool) -> Check:
    if gpus:
        names = "; ".join(f"{g.index}: {g.name}" for g in gpus)
        return Check("GPU", True, on_gpu, f"{len(gpus)} visible ({names})")
    return Check("GPU", not on_gpu, on_gpu, "none: nvidia-smi is missing or lists no GPU",
                 "Run on a machine with an NVIDIA GPU and its driver (nvidia-smi must list it), "
                 "or use --device cpu." if on_gpu else "")


def check_torch(on_gpu: bool) -> Check:
    torch = _torch()
    if torch is None:
        return Check("torch", False, True, "not importable from " + sys.executable,
                     "pip install torch (a CUDA build for GPUs: see pytorch.org for the index URL).")
    cuda = torch.version.cuda
    found = f"{torch.__version__}, " + (f"CUDA {cuda}" if cuda else "a CPU-only build") + \
        f", at {Path(torch.__file__).parent}"
    if on_gpu and not cuda:
        return Check("torch", False, True, found,
                     "Install a CUDA build of torch, e.g. pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130 (match the driver's CUDA version).")
    return Check("torch", True, True, found)


def check_compiler() -> Check:
    """The compiler torch uses: $CXX, else c++."""
    compiler = os.environ.get("CXX", "c++")
    path = shutil.which(compiler)
    version = _first_line(_run([path, "--version"])) if path else ""
    if not version:
        return Check("C++ compiler", False, True, f"{compiler!r} (torch's choice: $CXX or c++) not found",
                     "Install g++ (apt-get install g++) or set CXX to a C++17 compiler.")
    gcc = "gcc version" in _run([path, "-v"])  # the test torch applies before precompiling headers
    note = "" if gcc else "; not GCC, so torch will not precompile headers"
    return Check("C++ compiler", True, True, f"{path}: {version}{note}")


def check_ninja() -> Check:
    path = shutil.which("ninja")
    version = _first_line(_run([path, "--version"])) if path else ""
    if not version:
        return Check("ninja", False, True, "not on PATH", "pip install ninja (load_inline builds with it).")
    return Check("ninja", True, True, f"{path}: {version}")


def check_python_headers() -> Check:
    header = Path(sysconfig.get_path("include")) / "Python.h"
    if header.exists():
        return Check("Python headers", True, True, str(header))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Check("Python headers", False, True, f"{header} is missing",
                 f"Install the Python development headers (apt-get install python{version}-dev).")


def check_nvcc(on_gpu: bool, gpus: list[Gpu]) -> Check:
    """The nvcc load_inline will use: CUDA_HOME as torch finds it."""
    torch = _torch()
    home = None
    if torch is not None and torch.version.cuda:
        from torch.utils import cpp_extension

        home = cpp_extension.CUDA_HOME
    path = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    release = re.search(r"release (\d+)\.(\d+)", _run([path, "--version"]) if path else "")
    if not release:
        return Check("nvcc", not on_gpu, on_gpu, "not found" + ("" if on_gpu else " (not needed on cpu)"),
                     "Install the CUDA toolkit matching torch's CUDA version and set CUDA_HOME to it "
                     "(or put its bin/ on PATH)." if on_gpu else "")
    found = f"{path}: CUDA {release[1]}.{release[2]}"
    torch_cuda = torch.version.cuda if torch is not None else None
    if on_gpu and torch_cuda and torch_cuda.split(".")[0] != release[1]:
        return Check("nvcc", False, True, f"{found}, but torch is built for CUDA {torch_cuda}",
                     f"Install CUDA {torch_cuda.split('.')[0]}.x and point CUDA_HOME at it, "
                     "or install the torch build for your toolkit.")
    if on_gpu:
        archs = _run([path, "--list-gpu-arch"]).split()
        unsupported = sorted({g.arch for g in gpus if f"compute_{g.arch.replace('.', '')}" not in archs})
        if archs and unsupported:
            return Check("nvcc", False, True, f"{found}, which cannot build for compute capability "
                         f"{', '.join(unsupported)}",
                         "Install a CUDA toolkit that supports this GPU (see nvcc --list-gpu-arch).")
        if torch_cuda and torch_cuda != f"{release[1]}.{release[2]}":
            found += f" (torch: CUDA {torch_cuda}; a minor mismatch works)"
    return Check("nvcc", True, on_gpu, found)


def check_ncu(on_gpu: bool, ncu: Optional[str] = None, params: Path = Path("/proc/driver/nvidia/params")) -> Check:
    """Nsight Compute for `harness profile`; never needed (the torch profiler stands in).

    Counter access: the driver's RmProfilingAdminOnly parameter says whether only
    root may read the counters (ncu then fails with ERR_NVGPUCTRPERM)."""
    from .profiling.profile import PERMISSION_FIX, find_ncu

    ncu = ncu or find_ncu()
    out = _run([ncu, "--version"]).strip() if ncu else ""
    version = out.splitlines()[-1] if out else ""  # its last line: "Version 2025.3.0.0 (build ...)"
    if not version:
        return Check("ncu", False, False, "not found (harness profile uses the torch profiler instead)",
                     "Install Nsight Compute (it comes with the CUDA toolkit, or apt-get install nsight-compute) "
                     "and put ncu on PATH." if on_gpu else "")
    found = f"{ncu}: {version}"
    admin_only = re.search(r"RmProfilingAdminOnly:\s*(\d)", params.read_text()) if params.is_file() else None
    if admin_only and admin_only[1] == "1" and os.geteuid() != 0:
        return Check("ncu", False, False, f"{found}; only root may read the GPU's counters (ERR_NVGPUCTRPERM)",
                     f"To fix it, {PERMISSION_FIX}.")
    return Check("ncu", True, False, found + ("; counters readable" if admin_only else ""))


def cache_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_cache(cache_dir: Path) -> tuple[Check, int]:
    size = cache_size(cache_dir) if cache_dir.is_dir() else 0
    builds_dir = cache_dir / "builds"
    entries = sum(1 for d in builds_dir.iterdir() if d.is_dir()) if builds_dir.is_dir() else 0
    where = _existing_ancestor(cache_dir.resolve())
    free = shutil.disk_usage(where).free
    found = (f"{cache_dir}: {size / 2**20:.1f} MiB in {entries} build(s), {free / 2**30:.1f} GiB free"
             if cache_dir.exists() else f"{cache_dir}: not created yet, {free / 2**30:.1f} GiB free")
    if not os.access(where, os.W_OK):
        return Check("build cache", False, True, f"{found}; {where} is not writable",
                     "Pass a writable --cache-dir or set HARNESS_CACHE_DIR."), size
    return Check("build cache", True, True, found), size


PCH_FIXES = {
    "missing": "Run harness doctor --prepare once (about 45 s), so the first quick-idiom candidate "
               "does not pay for it.",
    "stale": "It was built with other flags (another device's idiom's, or a candidate's own) or by another "
             "torch: run harness doctor --prepare (about 45 s).",
    "unsupported": "torch precompiles headers only with g++ on Linux; candidates still build, "
                   "about 10 s slower each.",
}


def check_pch(status: str, needed: bool, seconds: Optional[float] = None, error: str = "") -> Check:
    found = f"{status}: {pch.pch_path()}" if status != "unsupported" else "unsupported here"
    directory = pch.pch_path().parent if status != "unsupported" else None
    if not error and status in ("missing", "stale") and not os.access(directory, os.W_OK):
        error = (f"torch's include directory {directory} is not writable, and torch writes the header there "
                 "(so would every candidate that asks for it): use a torch installed where you can write, "
                 "such as a virtual environment.")
    if error:
        return Check("precompiled header", False, needed, found, error)
    if seconds is not None and seconds >= 1:
        found += f" (built now in {seconds:.0f} s)"
    return Check("precompiled header", status == "ready", needed, found, PCH_FIXES.get(status, ""))


def diagnose(device: Optional[str] = None, cache_dir: Optional[Path] = None, prepare: bool = False) -> Diagnosis:
    """Every check for `device` (default: cuda when torch and a GPU are there);
    with `prepare`, builds the precompiled header first when it is not ready."""
    device = device or default_device()
    on_gpu = device.startswith("cuda")
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    gpus = list_gpus()
    torch_check = check_torch(on_gpu)
    checks = [check_gpus(gpus, on_gpu), torch_check, check_nvcc(on_gpu, gpus), check_compiler(), check_ninja(),
              check_python_headers(), check_ncu(on_gpu)]
    cache_check, size = check_cache(cache)
    checks.append(cache_check)
    diagnosis = Diagnosis(device, str(cache), gpus, checks, size)
    if _torch() is None:
        diagnosis.pch = "unsupported"
        checks.append(check_pch("unsupported", prepare))
        return diagnosis
    diagnosis.pch = pch.pch_status(device)
    error = ""
    if prepare and diagnosis.pch in ("missing", "stale") and torch_check.ok and cache_check.ok:
        try:
            diagnosis.pch_seconds = pch.prepare_pch(cache, device=device)
            diagnosis.pch = pch.pch_status(device)
        except pch.PchError as exc:
            error = str(exc)
    checks.append(check_pch(diagnosis.pch, prepare, diagnosis.pch_seconds, error))
    return diagnosis
