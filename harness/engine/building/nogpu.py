"""Compiling CUDA candidates where torch has no CUDA: a CPU-only torch and a CUDA toolkit (a laptop,
CI). torch's load_inline refuses CUDA sources there (its CUDA_HOME is None), and a CPU torch lacks
the CUDA libraries an extension links against and a few headers its CUDA headers include. So a build
child told CUDA's home (COMPILE_ONLY_ENV) points torch at it, links against empty stand-ins for
libc10_cuda and libtorch_cuda, finds stand-ins for the headers (torch's generated
cuda_cmake_macros.h; the cuBLAS, cuSPARSE and cuSOLVER handle types torch's CUDA headers name), and
does not load the extensions it builds: their code calls into torch's CUDA library. The same
ninja file, flags and compilers as on a GPU host run to the end, link included."""
from __future__ import annotations

import os
import shutil
import subprocess
import types
from pathlib import Path
from typing import Optional

from ...torch_install import torch_cuda
from .cache import file_lock

# Set in a build child (to CUDA's home): compile CUDA extensions, link them against stand-ins, load none.
COMPILE_ONLY_ENV = "HARNESS_COMPILE_ONLY"
STAND_INS = "stand-ins"
# Bump when what the stand-ins hold changes.
_STAND_INS_SCHEME = "1"

# The one header a CUDA build of torch generates for c10/cuda and a CPU build lacks, and the handle,
# status and error types of the CUDA libraries torch's CUDA headers name (a toolkit without those
# libraries lacks their headers); a candidate that calls the libraries itself needs the real ones.
_HEADERS = {
    "c10/cuda/impl/cuda_cmake_macros.h": "#define C10_CUDA_BUILD_SHARED_LIBS\n",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\n"
                   "typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n",
    "cublasLt.h": "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\n"
                  "typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n"
                  "const char* cusparseGetErrorString(cusparseStatus_t status);\n",
    "cusolver_common.h": "typedef enum { CUSOLVER_STATUS_SUCCESS = 0, CUSOLVER_STATUS_INVALID_VALUE = 3 } "
                         "cusolverStatus_t;\n",
    "cusolverDn.h": "#include <cusolver_common.h>\ntypedef struct cusolverDnContext* cusolverDnHandle_t;\n",
}
_LIBRARIES = ("c10_cuda", "torch_cuda")


def cuda_home() -> Optional[str]:
    """The CUDA toolkit's folder: CUDA_HOME or CUDA_PATH, else the folder above nvcc's on PATH, else
    /usr/local/cuda, the first that holds nvcc and CUDA's headers (an nvcc on PATH may be a script
    elsewhere); None where none does."""
    nvcc = shutil.which("nvcc")
    for found in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                  nvcc and str(Path(os.path.realpath(nvcc)).parent.parent), "/usr/local/cuda"):
        if found and (Path(found) / "bin" / "nvcc").exists() and (Path(found) / "include" / "cuda_runtime.h").exists():
            return found
    return None


def compiles_only(arch: str) -> bool:
    """Whether a build for `arch` compiles and links its CUDA extensions, not loading them: for a GPU arch
    with a torch that has no CUDA, where a CUDA toolkit is found."""
    return arch not in ("cpu", "unknown") and torch_cuda() is None and cuda_home() is not None


def stand_ins(directory: Path) -> Path:
    """Empty libc10_cuda.so and libtorch_cuda.so, so the link line torch writes resolves, and include/
    with the stand-in headers; made once, whole (under a lock, into a folder named by their scheme)."""
    made = Path(directory) / _STAND_INS_SCHEME
    with file_lock(made.with_suffix(".lock")):
        if (made / "done").exists():
            return made
        made.mkdir(parents=True, exist_ok=True)
        empty = made / "empty.c"
        empty.write_text("")
        for name in _LIBRARIES:
            subprocess.run(["cc", "-shared", "-fPIC", str(empty), "-o", str(made / f"lib{name}.so")], check=True,
                           capture_output=True)
        for name, text in _HEADERS.items():
            header = made / "include" / name
            header.parent.mkdir(parents=True, exist_ok=True)
            header.write_text("#pragma once\n" + text)
        (made / "done").write_text("")
    return made


def compile_only_env(cache_dir: Path, cuda: str) -> dict:
    """A build child's environment to compile CUDA extensions against the stand-ins, loading none.
    CPLUS_INCLUDE_PATH comes after the compilers' own include flags: a toolkit's real headers win."""
    made = stand_ins(Path(cache_dir) / STAND_INS)
    return {COMPILE_ONLY_ENV: cuda, "LIBRARY_PATH": _joined(made, os.environ.get("LIBRARY_PATH")),
            "CPLUS_INCLUDE_PATH": _joined(made / "include", os.environ.get("CPLUS_INCLUDE_PATH"))}


def _joined(first: Path, rest: Optional[str]) -> str:
    return os.pathsep.join([str(first), *([rest] if rest else [])])


def compile_only() -> None:
    """In a build child told to (COMPILE_ONLY_ENV): torch compiles CUDA sources with that toolkit, and an
    extension with a .cu is not loaded but stood in for by a module whose every function says why."""
    cuda = os.environ.get(COMPILE_ONLY_ENV)
    from torch.utils import cpp_extension

    if not cuda or getattr(cpp_extension._import_module_from_library, "compile_only", False):
        return
    cpp_extension.CUDA_HOME = cuda
    load = cpp_extension._import_module_from_library

    def import_or_stand_in(module_name, path, is_python_module):
        if not (Path(path) / "cuda.cu").exists():  # C++ alone loads on a CPU torch
            return load(module_name, path, is_python_module)
        return not_loaded(module_name) if is_python_module else str(Path(path) / f"{module_name}.so")

    import_or_stand_in.compile_only = True
    cpp_extension._import_module_from_library = import_or_stand_in


def not_loaded(name: str) -> types.ModuleType:
    """A module for an extension compiled but not loaded: any function of it raises, saying why."""
    module = types.ModuleType(name)

    def function(attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)

        def call(*args, **kwargs):
            raise RuntimeError(f"{name}.{attribute}: the extension was compiled, not loaded (this machine's torch "
                               "has no CUDA)")
        return call

    module.__getattr__ = function
    return module
