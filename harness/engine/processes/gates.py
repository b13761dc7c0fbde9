"""This process's own work on each device: the gate that keeps its timings apart from its other work there
(Children.untimed), and its staged workers, whichever problem's, which a timing there stops."""
from __future__ import annotations

import threading

from .child import Child


# one per device, for this process's work on it (Children.untimed): re-entrant, as a timing may hold it
_GATES: dict[str, threading.RLock] = {}
_GATES_LOCK = threading.Lock()


def gate(key: str) -> threading.RLock:
    with _GATES_LOCK:
        return _GATES.setdefault(key, threading.RLock())


# this process's staged workers per device (Children.stage), whichever problem's: a timing there pauses them all
_STAGED: dict[str, set[Child]] = {}


def list_staged(key: str, worker: Child) -> None:
    with _GATES_LOCK:
        _STAGED.setdefault(key, set()).add(worker)


def unstage(key: str, worker: Child) -> None:
    with _GATES_LOCK:
        _STAGED.get(key, set()).discard(worker)


def staged_on(key: str) -> list[Child]:
    with _GATES_LOCK:
        return list(_STAGED.get(key, ()))
