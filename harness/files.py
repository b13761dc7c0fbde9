"""Two small helpers every layer needs: unpredictable seeds, and files that are
never seen half-written."""
from __future__ import annotations

import os


def new_seed() -> int:
    """From the OS, so no process can predict it."""
    return int.from_bytes(os.urandom(8), "little") >> 1
