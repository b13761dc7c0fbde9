"""This harness process's work on one device, between its threads: a timing there runs alone,
untimed work (a sweep's other shapes, a problem lint, a problem's processes ending) runs beside
other untimed work.

Untimed work shares the gate; a timing waits until no other thread holds it and keeps it to
itself. A timing waiting comes first: untimed work that a thread has not already begun waits for
it, so a stream of untimed steps never holds a timing back. Both are re-entrant for the thread
that holds the gate, either way. (Across harness processes the device's lock, device_lock.py,
keeps timings apart.)"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Optional


class Gate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._alone: Optional[int] = None  # the thread timing, if one is
        self._alone_depth = 0
        self._shared: dict[int, int] = {}  # the threads sharing it, with their depth
        self._waiting_alone = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Untimed work: beside other untimed work, never beside another thread's timing."""
        me = threading.get_ident()
        with self._changed:
            while not self._may_share(me):
                self._changed.wait()
            self._shared[me] = self._shared.get(me, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                self._shared[me] -= 1
                if not self._shared[me]:
                    del self._shared[me]
                self._changed.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """A timing: no other thread's work (timed or not) on the device meanwhile."""
        me = threading.get_ident()
        with self._changed:
            self._waiting_alone += 1
            try:
                while not self._may_hold_alone(me):
                    self._changed.wait()
            finally:
                self._waiting_alone -= 1
            self._alone, self._alone_depth = me, self._alone_depth + 1
        try:
            yield
        finally:
            with self._changed:
                self._alone_depth -= 1
                if not self._alone_depth:
                    self._alone = None
                self._changed.notify_all()

    def _may_share(self, me: int) -> bool:
        if self._alone == me or me in self._shared:  # re-entered: it holds the gate already
            return True
        return self._alone is None and not self._waiting_alone

    def _may_hold_alone(self, me: int) -> bool:
        return self._alone in (None, me) and all(thread == me for thread in self._shared)
