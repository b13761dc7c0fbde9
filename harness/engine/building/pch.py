"""Torch's precompiled header, shared by every load_inline(use_pch=True) build: whether it is ready
for a device's idiom, making it (under the lock build children take around the same step), and
making it aside, in a process of its own, while candidates build without it."""
from __future__ import annotations

import contextlib
import os
import platform
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from ...torch_install import torch_dir
from .cache import file_lock, first_errors


class PchError(RuntimeError):
    """The precompiled header could not be built; the message says why and what to do."""


class _WouldBuild(Exception):
    pass


def pch_path() -> Path:
    """The precompiled torch/extension.h that load_inline(use_pch=True) uses: one per torch install."""
    return torch_dir() / "include" / "torch" / "extension.h.gch"


# The extra_cflags the CPU idiom passes with use_pch=True (prompts/idiom_cpu.py.j2): torch makes its one
# header with a build's own flags and remakes it for others, so on a CPU the header is made with these.
# The GPU idiom passes none (its host code is a thin wrapper).
CPU_CFLAGS = ("-O3",)


def pch_cflags(device: str) -> Optional[list[str]]:
    """The extra_cflags torch's header is made with for candidates on `device` ("cpu", "cuda", "cuda:1")."""
    return list(CPU_CFLAGS) if device == "cpu" else None


def pch_status(device: str = "cuda") -> str:
    """"ready", "missing", "stale" (built with other flags, such as another device's, or by another
    torch), or "unsupported" (torch precompiles only with g++ on Linux), for candidates on `device`.

    Runs torch's own check with its compile step intercepted, so the answer follows
    torch's signature rule without copying it (see _header_compile)."""
    from torch.utils import cpp_extension as ext

    check = getattr(ext, "_check_and_build_extension_h_precompiler_headers", None)
    try:
        supported = check is not None and platform.system() == "Linux" and \
            ext.check_compiler_is_gcc(ext.get_cxx_compiler())
    except (OSError, subprocess.SubprocessError):  # no C++ compiler at all
        supported = False
    if not supported:
        return "unsupported"
    if not pch_path().exists():
        return "missing"

    def would_build(args, run):
        raise _WouldBuild

    try:
        with _header_compile(would_build):
            check(pch_cflags(device), None)
    except _WouldBuild:
        return "stale"
    return "ready"


@contextlib.contextmanager
def _header_compile(handle):
    """Within it, torch's precompiled-header step calls `handle(args, run)` in place of its
    compile (`run(command)` is the real subprocess.check_output); its other subprocess calls
    run as they are. It swaps cpp_extension.subprocess: not for use while another thread of
    this process runs load_inline."""
    from torch.utils import cpp_extension as ext

    real = ext.subprocess

    class Intercepted:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def check_output(args, *rest, **kwargs):
            if "c++-header" in args:
                return handle(list(args), lambda command: real.check_output(command, *rest, **kwargs))
            return real.check_output(args, *rest, **kwargs)

    ext.subprocess = Intercepted()
    try:
        yield
    finally:
        ext.subprocess = real


def pch_lock_path(cache_dir: Path) -> Path:
    """One lock per torch install (the header is per install), beside the header
    where that is writable."""
    header = pch_path()
    return header.with_suffix(".lock") if os.access(header.parent, os.W_OK) else Path(cache_dir) / "pch.lock"


def pch_ready() -> bool:
    return pch_status() == "ready"


def prepare_pch(cache_dir: Path, runner: Sequence[str] = (), device: str = "cuda") -> float:
    """Build the precompiled header as the idiom for `device` needs it (pch_cflags),
    unless it is ready; returns the seconds spent. Holds the lock that build
    children take around the same step. Raises PchError. `runner` prefixes the
    compiler's command (`nice`, `taskset`: a sweep keeps it on its build cores)."""
    with file_lock(pch_lock_path(cache_dir)):
        return _make_pch(runner, pch_cflags(device))


def _make_pch(runner: Sequence[str], cflags: Optional[list[str]] = None) -> float:
    """prepare_pch's work, its lock held by the caller. The header is compiled into a file of its
    own and renamed over torch's at the end, so builds may run meanwhile: g++ opens the old
    header, none, or the whole new one, never a half-written one."""
    from torch.utils import cpp_extension

    directory = pch_path().parent
    if not os.access(directory, os.W_OK):
        raise PchError(f"torch's include directory {directory} is not writable, and torch writes the "
                       "precompiled header there. Use a torch installed where you can write (a virtual "
                       "environment); candidates still build without it, about 10 s slower each.")

    def compile_aside(args: list[str], run):
        final = args[args.index("-o") + 1]
        aside = f"{final}.{os.getpid()}.partial"
        args[args.index("-o") + 1] = aside
        try:
            output = run([*runner, *args])
            os.replace(aside, final)
            return output
        finally:
            Path(aside).unlink(missing_ok=True)

    started = time.monotonic()
    with _header_compile(compile_aside):
        try:
            cpp_extension._check_and_build_extension_h_precompiler_headers(cflags, None)
        except RuntimeError as exc:
            output = getattr(exc.__cause__, "output", None) or b""
            errors = first_errors(output.decode(errors="replace") if isinstance(output, bytes) else str(output))
            raise PchError(f"Building torch's precompiled header {pch_path()} failed: {exc}. Compiler said: "
                           + (" | ".join(errors) or "nothing")) from None
    return time.monotonic() - started


# Whether this process has looked at the header yet (start_pch_aside looks once).
_PCH_LOOKED = threading.Lock()
_pch_looked = False
# How long the header's maker may take to hold its lock: a Python start, no torch import.
PCH_MAKER_START_S = 30.0


def start_pch_aside(cache_dir: Path, runner: Sequence[str] = ()) -> bool:
    """Where torch's header is missing or stale, starts its making in a process of its own, once
    per harness process, and returns True once that holds the header's lock. A build child that
    finds the lock held compiles its binding without the header (workers.common.serialize_pch_builds)
    rather than wait: the header takes longer to make (about 30 s of g++) than a binding takes
    without it (about 10 s more than with it). The maker outlives this process, so the header is
    there for the next one; what it says goes to the cache's logs (pch.log)."""
    global _pch_looked
    with _PCH_LOOKED:
        if _pch_looked:
            return False
        _pch_looked = True
        if pch_status() not in ("missing", "stale") or not os.access(pch_path().parent, os.W_OK):
            return False
        log_dir = Path(cache_dir) / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / "pch.log", "ab") as log:
            maker = subprocess.Popen(_maker_command(str(pch_lock_path(cache_dir)), list(runner)),
                                     stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=str(Path(__file__).resolve().parents[3]))
        ready, _, _ = select.select([maker.stdout], [], [], PCH_MAKER_START_S)
        said = maker.stdout.readline().strip() if ready else b""
        maker.stdout.close()
        # waited for aside, so that it is reaped when it ends, not left a zombie of this process
        threading.Thread(target=maker.wait, daemon=True, name="pch-maker").start()
        return said == b"locked"


def _maker_command(lock: str, runner: list[str]) -> list[str]:
    return [sys.executable, "-m", __name__, lock, *runner]


def _pch_maker(lock: str, runner: list[str]) -> None:
    """The process start_pch_aside starts: the lock first (no torch needed for it), then the header."""
    with file_lock(lock, wait=False) as held:
        print("locked" if held else "busy", flush=True)  # busy: another process makes it
        os.close(1)  # its reader is gone by the time the header is made
        if not held:
            return
        try:
            print(f"torch's precompiled header made in {_make_pch(runner):.1f} s", file=sys.stderr)
        except PchError as exc:
            print(exc, file=sys.stderr)


if __name__ == "__main__":
    _pch_maker(sys.argv[1], sys.argv[2:])
