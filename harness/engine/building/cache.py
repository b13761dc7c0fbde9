"""The build cache: a directory per candidate source and arch (its record and log), and one per
extension built (extensions.py: keyed by load_inline's arguments, shared by every candidate that
passes the same).

A build is the candidate's import (load_inline compiles at import), done in a
child process whose load_inline builds in the extension's own directory. A later
import with the same environment finds the extension built and only loads it, so
the worker that runs the candidate pays no build.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Optional

from ...files import write_atomic
from ...results import BuildResult
from ...torch_install import torch_cuda, torch_version

# Bump when the way candidates are built changes, so old cache entries are not reused. 2: extensions
# built in directories keyed by load_inline's arguments (scheme 1 built them inside the entry). 3: lean
# headers (headers.py).
BUILD_SCHEME = "3"
BUILD_RECORD = "build.json"
# Where a child's load_inline builds its extensions (extensions.py); unset, load_inline is torch's own.
EXTENSIONS_ENV = "HARNESS_EXTENSIONS_DIR"


def cache_key(source: str, arch: str) -> str:
    parts = [BUILD_SCHEME, source, arch, torch_version(), str(torch_cuda()), platform.python_version()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class BuildEntry:
    """One candidate's place in the cache: an ok build, or a compile error with its first errors."""

    def __init__(self, cache_dir: Path, source: str, arch: str):
        self.cache_dir = Path(cache_dir)
        self.key = cache_key(source, arch)
        self.dir = self.cache_dir / "builds" / self.key[:24]
        self.arch = arch

    @property
    def log_path(self) -> Path:
        return self.dir / "build.log"

    @property
    def lock_path(self) -> Path:
        return self.dir.with_suffix(".lock")

    @property
    def extensions(self) -> Path:
        """Where load_inline builds, each extension in its keyed directory (extensions.py)."""
        return self.cache_dir / "extensions"

    def env(self) -> dict:
        # TORCH_EXTENSIONS_DIR: where torch's other builders (cpp_extension.load) put theirs
        env = {"TORCH_EXTENSIONS_DIR": str(self.dir / "ext"), EXTENSIONS_ENV: str(self.extensions)}
        if self.arch not in ("cpu", "unknown"):
            env["TORCH_CUDA_ARCH_LIST"] = self.arch
        return env

    def recorded(self) -> Optional[BuildResult]:
        from ...results import from_json

        try:
            return from_json(BuildResult, (self.dir / BUILD_RECORD).read_text())
        except (OSError, ValueError, TypeError):
            return None

    def record(self, result: BuildResult) -> None:
        from ...results import to_json

        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.dir / BUILD_RECORD, to_json(result))


# gcc/clang "file:12:5: error: ...", nvcc "file(12): error: ...", either as places.py says where it is
# ("kernel.py line 40 (main.cpp:36:5): error: ..."), and the linker
_COMPILER_ERROR = re.compile(r"((:\d+(:\d+)?|\)): (fatal |catastrophic )?error|"
                             r"undefined reference|undefined symbol|ld returned)")
_PYTHON_ERROR = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit)\b")


def first_errors(log_text: str, limit: int = 12) -> list[str]:
    """The lines of a build log that matter.

    Compiler diagnostics first, each with the two lines after it (source line
    and caret), paths cut to their file names; failing that, the Python
    exception that ended the import."""
    lines = log_text.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if _COMPILER_ERROR.search(line) and re.sub(r"^/\S*/", "", line.rstrip()) not in picked:
            for extra in lines[i:i + 3]:
                extra = re.sub(r"^/\S*/", "", extra.rstrip())
                if extra.strip() and extra not in picked[-3:]:
                    picked.append(extra)
        if len(picked) >= limit:
            break
    if not picked:
        picked = [line for line in lines if _PYTHON_ERROR.match(line)][-1:] or lines[-limit:]
    return [line[:300] for line in picked[:limit]]


def log_tail(path: Path, max_bytes: int = 200_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@contextlib.contextmanager
def file_lock(path: str | Path | None, wait: bool = True):
    """An exclusive flock; released by the kernel if the holder dies. Yields whether it is held:
    always with `wait`, else only where nobody held it."""
    if not path:
        yield True
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
