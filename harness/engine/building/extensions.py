"""load_inline keyed on what it builds. In a candidate's process load_inline is wrapped: each call
builds in a directory of the cache named by the hash of its own arguments (name, sources, functions,
flags, include paths, ...) and of the toolchain that compiles them, whatever else the candidate's
file says. So a candidate that changes only its Python finds its extension built (ninja has nothing
to do), and two candidates with the same sources share one build, one at a time under its lock.
The key is taken from the values passed, after the candidate's code computed them; the headers the
extension is built with (lean or as written, headers.py) are its directory's own choice."""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import platform
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ...results import Headers
from .cache import EXTENSIONS_ENV, file_lock
from .headers import build_with_headers, read_choice
from .nogpu import COMPILE_ONLY_ENV

# Bump when what goes into the key changes, or what a key's directory builds. 2: lean headers (headers.py).
KEY_SCHEME = "2"
# Arguments that change nothing built: where it goes and what is printed or kept meanwhile.
_UNKEYED = ("build_directory", "verbose", "keep_intermediates")
_SOURCES = ("cpp_sources", "cuda_sources", "sycl_sources")
_LISTS = ("extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths")
# Environment that torch's build reads: compilers, CUDA's place, the GPU arch list.
# Compiled only, against stand-ins (nogpu.py), is another build than one loaded.
_BUILD_ENV = ("CXX", "CC", "PYTORCH_NVCC", "TORCH_CUDA_ARCH_LIST", "CUDA_INC_PATH", "CUDNN_HOME", COMPILE_ONLY_ENV)
# A keyed directory's name: the key's first 24 hex digits.
EXTENSION_NAME = re.compile(r"[0-9a-f]{24}")
# What a build leaves that the compiler or linker wrote: the objects and the library.
_PRODUCTS = (".o", ".so")


@dataclass
class ExtensionBuilt:
    """One load_inline call of this process: its directory's name (the key's first 24 hex digits),
    whether a compiler or linker ran for it, and the headers it was built with (None: its call raised
    before any was chosen)."""

    key: str
    compiled: bool
    headers: Optional[Headers] = None


# This process's load_inline calls, in order (the build role reports them).
BUILT: list[ExtensionBuilt] = []
# Per extension name, its last call's key and the version torch gave it: torch builds a name called again
# with other sources as name_v1, name_v2, ..., and the versioned name is in the built library.
_VERSIONS: dict[str, tuple[str, int]] = {}


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) if isinstance(v, os.PathLike) else v for v in value]


def headers_of(built: list[ExtensionBuilt]) -> Optional[Headers]:
    """A build's headers: full where any extension was built as written, else lean where any was built."""
    chosen = {b.headers for b in built}
    return Headers.FULL if Headers.FULL in chosen else (Headers.LEAN if Headers.LEAN in chosen else None)


def normalized(arguments: dict) -> dict:
    """load_inline's bound arguments as they decide the build: a string and a list of one string
    alike, no list and an empty one alike, `functions` as torch binds them (name and docstring)."""
    found = {name: value for name, value in arguments.items() if name not in _UNKEYED}
    for name in (*_SOURCES, *_LISTS):
        if name in found:
            found[name] = _as_list(found[name])
    functions = found.get("functions")
    if isinstance(functions, (str, list, tuple)):
        found["functions"] = {f: f for f in _as_list(functions)}
    return found


def extension_key(arguments: dict, toolchain: dict, version: int = 0) -> str:
    """The hash of a load_inline call's normalized arguments, the toolchain and torch's version of the name."""
    text = json.dumps([KEY_SCHEME, normalized(arguments), toolchain, version], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def _real(program: Optional[str]) -> str:
    """A program's resolved path: a compiler's often names its version (c++ -> x86_64-linux-gnu-g++-12)."""
    found = shutil.which(program) if program else None
    return os.path.realpath(found or program) if (found or program) else ""


def toolchain() -> dict:
    """What compiles an extension here, beside its arguments: torch (version, CUDA, ABI, install),
    Python, the machine, the compilers and the environment torch's build reads."""
    import torch
    from torch.utils import cpp_extension

    return {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda),
            "torch_dir": str(Path(torch.__file__).parent), "cxx11_abi": bool(torch.compiled_with_cxx11_abi()),
            "python": platform.python_version(),
            "machine": platform.machine(), "cxx": _real(cpp_extension.get_cxx_compiler()),
            "cuda_home": _real(cpp_extension.CUDA_HOME),
            "env": {name: os.environ[name] for name in _BUILD_ENV if name in os.environ}}


def extension_dir(root: str | Path, key: str) -> Path:
    return Path(root) / key[:24]


def extension_lock(directory: Path) -> Path:
    """The lock a keyed directory is built (or landed, shipping.py) under."""
    return directory.with_suffix(".lock")


def built_here(directory: Path) -> bool:
    """Whether a keyed directory holds a built library (its link is a build's last step)."""
    return directory.is_dir() and any(p.suffix == ".so" for p in directory.iterdir())


def _products(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir() if p.suffix in _PRODUCTS}


def key_builds() -> None:
    """Wrap torch's load_inline in this process (once): calls made afterwards, from wherever they
    imported it, build in keyed directories under EXTENSIONS_ENV where it is set."""
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    if getattr(original, "keyed", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def load_inline(*args, **kwargs):
        root = os.environ.get(EXTENSIONS_ENV)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # torch's own error names the argument
        if not root:
            return original(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        chain = toolchain()
        name, plain = arguments["name"], extension_key(arguments, chain)
        last = _VERSIONS.get(name)
        version = 0 if last is None else last[1] + (last[0] != plain)
        _VERSIONS[name] = (plain, version)
        directory = extension_dir(root, extension_key(arguments, chain, version))
        directory.mkdir(parents=True, exist_ok=True)
        with file_lock(extension_lock(directory)):
            # torch's own lock file, where a build killed mid-way left it (older torch waits on it forever)
            (directory / "lock").unlink(missing_ok=True)
            before = _products(directory)
            built = ExtensionBuilt(directory.name, False)
            try:
                module, built.headers = build_with_headers(original, {**arguments, "build_directory": str(directory)},
                                                           directory)
                return module
            finally:
                built.compiled = _products(directory) != before
                if built.headers is None:  # it raised: what its record says it was built with
                    choice = read_choice(directory)
                    built.headers = choice.headers if choice else None
                BUILT.append(built)

    load_inline.keyed = True
    cpp_extension.load_inline = load_inline
