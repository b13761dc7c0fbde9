"""One timing process per device, across harness processes: a lock file per device
under the cache directory, held while a candidate is timed there (fcntl.flock, so a
killed holder lets go at once)."""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path
from typing import Callable, Optional


def device_key(device: str, gpu: Optional[int]) -> str:
    """The physical device: "cpu", or "gpu" and the index (or id) the process will see as its first."""
    if device == "cpu":
        return "cpu"
    if gpu is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        gpu = visible or (device.partition(":")[2] or "0")
    return "gpu" + re.sub(r"[^A-Za-z0-9-]", "_", str(gpu))


class DeviceLock:
    """`with DeviceLock(cache, key, on_wait):` holds the device; a holder elsewhere is waited for,
    and `on_wait` is told once, with the holder's pid."""

    def __init__(self, cache: Path, key: str, on_wait: Callable[[str], None]):
        self.path = Path(cache) / "locks" / f"device-{key}.lock"
        self.key, self.on_wait = key, on_wait
        self.waited_for: Optional[str] = None  # the holder waited for, if any

    def __enter__(self) -> "DeviceLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a+")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "unknown"
            self.waited_for = holder
            self.on_wait(f"waiting for {self.key.replace('gpu', 'GPU ')}, held by pid {holder}")
            fcntl.flock(self.file, fcntl.LOCK_EX)
        self.file.truncate(0)
        self.file.write(str(os.getpid()))
        self.file.flush()
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()
