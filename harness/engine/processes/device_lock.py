"""One timing process per device, across harness processes: a lock file per device
under the cache directory, held while a candidate is timed there (fcntl.flock, so a
killed holder lets go at once). A process that may take any of several GPUs asks which
locks are held at its start and takes a GPU no other is timing on.

Loads and a spare's first calls hold the lock too, in steps, beside the checks; a measurement waiting
for it goes before them (DeviceLock's `defer`): it holds a second file, the device's "want", while it
waits, and they take the lock only while no one holds that."""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence


def device_key(device: str, gpu: Optional[int]) -> str:
    """The physical device: "cpu", or "gpu" and the index (or id) the process will see as its first."""
    if device == "cpu":
        return "cpu"
    if gpu is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        gpu = visible or (device.partition(":")[2] or "0")
    return "gpu" + re.sub(r"[^A-Za-z0-9-]", "_", str(gpu))


def _lock_path(cache: Path, key: str) -> Path:
    return Path(cache) / "locks" / f"device-{key}.lock"


def _want_path(cache: Path, key: str) -> Path:
    return Path(cache) / "locks" / f"device-{key}.want"


def held_devices(cache: Path, keys: Iterable[str]) -> dict[str, str]:
    """Which of `keys` a process holds now, each with the pid its lock file records.

    Each lock is tried without waiting and let go at once, so a holder that died counts as gone
    (the kernel let go for it) whatever pid its file still records; a process asking for the
    lock in that instant waits that instant."""
    held = {}
    for key in keys:
        try:
            file = open(_lock_path(cache, key))
        except FileNotFoundError:  # never locked under this cache
            continue
        with file:  # closing lets go of a lock taken here
            try:
                fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: probes never block each other
            except BlockingIOError:
                held[key] = file.read().strip() or "unknown"
    return held


def pick_gpu(visible: Sequence[int], held: Mapping[int, str]) -> tuple[int, Optional[str]]:
    """The GPU to time on: the first of `visible` that no other harness process holds (`held`:
    GPU to holder pid), else the first, to wait for as with one GPU. The reason is a line for
    the user, None when the first GPU is taken for want of any news."""
    free = [gpu for gpu in visible if gpu not in held]
    if free and free[0] == visible[0]:
        return visible[0], None
    passed = visible[:visible.index(free[0])] if free else visible
    busy = "; ".join(f"GPU {gpu} is being timed by harness pid {held[gpu]}" for gpu in passed)
    if not free:
        return visible[0], f"Every GPU is busy ({busy}); waiting for GPU {visible[0]}."
    return free[0], f"{busy}; using GPU {free[0]}."


class DeviceLock:
    """`with DeviceLock(cache, key, on_wait):` holds the device; a holder elsewhere is waited for,
    and `on_wait` is told once, with the holder's pid. The file records `owner`'s pid (default this
    process's): a reference process loading for a harness process holds the lock on its behalf, and a
    wait for it is a wait for that harness process, not for another's. With `wait=False` a holder
    is not waited for: `held` says whether the lock was free and is held now.

    `defer`: work that only needs no timing beside it (a load, a spare's first calls) lets a measurement
    that waits for the device go first: it takes the lock only once none waits (with `wait=False`, not
    at all while one does), so a measurement waits for the step in progress, not for the ones after it."""

    def __init__(self, cache: Path, key: str, on_wait: Callable[[str], None] = lambda holder: None,
                 owner: Optional[int] = None, wait: bool = True, defer: bool = False):
        self.path, self.want = _lock_path(cache, key), _want_path(cache, key)
        self.key, self.on_wait, self.owner, self.wait, self.defer = key, on_wait, owner or os.getpid(), wait, defer
        self.waited_for: Optional[str] = None  # the holder waited for, if any
        self.held = False

    def __enter__(self) -> "DeviceLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a+")
        while True:
            if self.defer and not self._none_wants(self.wait):
                return self
            if not self._take():
                return self
            if not self.defer or self._none_wants(wait=False):
                break
            fcntl.flock(self.file, fcntl.LOCK_UN)  # a measurement came to wait meanwhile: it goes first
        self.held = True
        self.file.truncate(0)
        self.file.write(str(self.owner))
        self.file.flush()
        return self

    def _take(self) -> bool:
        """The lock, waited for unless `wait` is False (then whether it was free)."""
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not self.wait:
                return False
        if self.waited_for is None:
            self.file.seek(0)
            self.waited_for = self.file.read().strip() or "unknown"
            self.on_wait(f"waiting for {self.key.replace('gpu', 'GPU ')}, held by pid {self.waited_for}")
        with open(self.want, "a") as want:
            if not self.defer:  # held while it waits: deferring work takes the lock after it
                fcntl.flock(want, fcntl.LOCK_EX)
            fcntl.flock(self.file, fcntl.LOCK_EX)
        return True

    def _none_wants(self, wait: bool) -> bool:
        """Whether no measurement waits for the device now; with `wait`, once none does."""
        with open(self.want, "a") as want:
            try:
                fcntl.flock(want, fcntl.LOCK_SH | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return False
        return True

    def __exit__(self, *exc) -> None:
        if self.held:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.held = False
        self.file.close()
