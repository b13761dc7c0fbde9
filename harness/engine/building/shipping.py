"""A build cache entry carried from the host that built it to the host that imports it.

load_inline re-runs ninja at every import, and ninja builds again whatever it finds moved,
newer than its logs or made by other commands: so a built extension loads as built only under
the toolchain it was built with, at the same paths (torch's, CUDA's, the cache's), its files'
times kept to the nanosecond. Each host says its `Toolchain`; hosts that differ are refused
before anything is carried, and an entry lands only where its cache key (source, arch, torch,
CUDA, Python) is the one the importing host computes itself. The extensions the entry's build
named (extensions.py's keyed directories) travel with it.
"""
from __future__ import annotations

import io
import os
import platform
import shutil
import tarfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional

from .cache import BuildEntry, file_lock
from .extensions import EXTENSION_NAME, built_here, extension_dir, extension_lock

# An entry over this many bytes is built again where it is timed rather than carried: a usual
# CUDA extension is a few MB, and every byte carried sits in the cluster's object store meanwhile.
SHIP_LIMIT_BYTES = 256 << 20
# The pax record of a file's mtime in nanoseconds: tar keeps microseconds at best, and ninja
# takes an output newer than its deps log to the nanosecond for one to build again.
MTIME_NS = "HARNESS.mtime_ns"


@dataclass(frozen=True)
class Toolchain:
    """What a built extension depends on beyond its source and arch, as one host has it."""
    torch: str
    cuda: str  # the CUDA torch was built with
    python: str
    machine: str
    libc: str
    torch_dir: str  # its headers' and libraries' paths are in the build's commands
    cuda_home: str  # the toolkit whose nvcc and headers the build used
    cache: str  # where the entry sits: its sources' paths are in the build's commands

    @classmethod
    def here(cls, cache: Path) -> "Toolchain":
        import torch
        from torch.utils.cpp_extension import CUDA_HOME

        return cls(torch.__version__, str(torch.version.cuda), platform.python_version(), platform.machine(),
                   " ".join(platform.libc_ver()), str(Path(torch.__file__).parent), str(CUDA_HOME),
                   str(Path(cache).absolute()))

    def differences(self, other: "Toolchain") -> list[str]:
        """Each field that differs, as "name A against B" (this one's, then the other's)."""
        return [f"{f.name} {getattr(self, f.name)} against {getattr(other, f.name)}" for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]


def misfits(here: BuildEntry, made: BuildEntry, gpu: str) -> list[str]:
    """Why an entry made elsewhere would not load here as built, for `here`, this host's entry of
    the same source and arch list, and `gpu`, this host's GPU capability (or "cpu")."""
    unfit = []
    if here.key != made.key:
        unfit.append("its cache key (of the source, the arch list and torch's, CUDA's and Python's versions) "
                     "is not the one this node computes")
    if gpu not in made.arch.split(";"):
        unfit.append(f"it was built for {made.arch}, and this node's GPU is {gpu}")
    return unfit


# In a packed entry: the entry's own files, and each extension's under its directory's name.
ENTRY, EXTENSIONS = "entry", "extensions"


def _parts(entry: BuildEntry) -> dict[str, Path]:
    """What an entry carries: its directory and its extensions' (by their names in the tar)."""
    record = entry.recorded()
    parts = {ENTRY: entry.dir}
    for key in record.extensions if record else []:
        parts[f"{EXTENSIONS}/{key}"] = extension_dir(entry.extensions, key)
    return parts


def pack(entry: BuildEntry) -> Optional[bytes]:
    """The entry's directory and its extensions' as a gzipped tar, or None where they are over
    SHIP_LIMIT_BYTES."""
    files = [(name, root, p) for name, root in _parts(entry).items() for p in sorted(root.rglob("*")) if p.is_file()]
    if sum(p.stat().st_size for _, _, p in files) > SHIP_LIMIT_BYTES:
        return None
    buffer = io.BytesIO()
    # level 1: the objects barely compress further, and the build host's cores have builds to run
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
        for name, root, path in files:
            info = tar.gettarinfo(str(path), arcname=f"{name}/{path.relative_to(root)}")
            info.pax_headers = {MTIME_NS: str(path.stat().st_mtime_ns)}
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return buffer.getvalue()


def landed(entry: BuildEntry) -> bool:
    """Whether the entry holds a good build already (a shared filesystem, or an earlier landing)."""
    built = entry.recorded()
    return bool(built and built.ok)


def land(entry: BuildEntry, data: bytes) -> None:
    """Unpacks a packed entry into its place, unless a good build is there already. It is
    unpacked beside its place and renamed into it whole, under the entry's lock (the one its
    build takes), each extension first, under its own lock, unless one is built there already:
    no import ever sees half of either."""
    with file_lock(entry.lock_path):
        if landed(entry):
            return
        partial = entry.dir.with_name(f"{entry.dir.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = tar.getmembers()
                for member in members:  # pack writes files by relative names, nothing else
                    parts = Path(member.name).parts
                    if not member.isfile() or member.name.startswith("/") or ".." in parts \
                            or not (parts[0] == ENTRY or parts[0] == EXTENSIONS and len(parts) > 2
                                    and EXTENSION_NAME.fullmatch(parts[1])):
                        raise tarfile.TarError(f"{member.name} is not a file of a build entry")
                tar.extractall(partial, members=members, filter="data")
                for member in members:
                    mtime = int(member.pax_headers[MTIME_NS])
                    os.utime(partial / member.name, ns=(mtime, mtime))
            for carried in sorted((partial / EXTENSIONS).glob("*")):
                target = extension_dir(entry.extensions, carried.name)
                with file_lock(extension_lock(target)):
                    if not built_here(target):
                        _replace(target, carried)
            _replace(entry.dir, partial / ENTRY)
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def _replace(target: Path, carried: Path) -> None:
    """`carried` renamed into `target`, in place of what is there (a build that died half way, or failed)."""
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    carried.rename(target)
