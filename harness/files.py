"""Two small helpers every layer needs: files that are never seen half-written, and
seeds nobody can predict."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write to a temporary name beside `path`, then rename: a reader (or a run killed
    mid-write) sees the old file or the new one, never half of one."""
    path = Path(path)
    # the thread too: a pool's threads write the same build record when two candidates share a source
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# Taken at import: in the candidate's worker, before candidate code runs, so a replaced os.urandom
# cannot choose the seeds drawn there (the re-check's sampled positions).
_urandom = os.urandom


def new_seed() -> int:
    """From the OS, so no process can predict it."""
    return int.from_bytes(_urandom(8), "little") >> 1
