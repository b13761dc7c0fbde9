"""A suite of runs on disk: `harness run --suite DIR` keeps one run directory per problem, as
`harness run` makes them, and beside them a record of the whole suite:

    runs/suite-20261122T0545Z-level1-1f3bc0/
      suite.json   the settings every run starts from, the problems, and per problem its run,
                   status, stop reason, rounds and best speedup, updated as each round ends
      suite.lock   held by the process running the suite

The record names each problem's run directory (a sibling under the same runs dir), so a
resumed suite skips the finished problems and carries on the others' runs.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..files import write_atomic
from ..results import from_json, to_json
from .settings import Evaluation, Settings
from .store import Status, StoreError, held, hold, new_run_id, utc_now

SUITE_FILE = "suite.json"
SUITE_LOCK = "suite.lock"
SUITE_PREFIX = "suite-"


class Standing(enum.StrEnum):
    """Where one problem of a suite stands."""

    PENDING = "pending"  # its run has not started
    RUNNING = "running"
    FINISHED = "finished"  # a stop rule ended its run: the suite is done with it
    INTERRUPTED = "interrupted"
    FAILED = "failed"  # its run ended on an error (an endpoint that failed, a problem that cannot run)


@dataclass
class SuiteProblem:
    path: str  # the problem file, absolute
    name: str  # its stem, as its run names it
    level: str  # the level directory it sits in (KernelBench's level1, ...), else the suite directory's name
    run: str = ""  # its run directory's name under the runs dir; "" before it starts
    standing: Standing = Standing.PENDING
    stop_reason: str = ""
    outcome: str = ""
    rounds: int = 0
    best: Optional[float] = None  # the best correct candidate's speedup
    message: str = ""


@dataclass
class SuiteRecord:
    id: str
    directory: str  # the problems' directory, absolute
    settings: Settings  # what every run starts from; each sets its own problem (and files)
    evaluation: Evaluation
    concurrency: int
    created: str
    problems: list[SuiteProblem] = field(default_factory=list)
    updated: str = ""
    status: Status = Status.RUNNING
    seconds: float = 0.0  # time spent running, summed over resumes

    @property
    def finished(self) -> int:
        return sum(1 for p in self.problems if p.standing is Standing.FINISHED)


class SuiteStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock_fd: Optional[int] = None

    @classmethod
    def create(cls, runs_dir: str | Path, name: str) -> "SuiteStore":
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = runs_dir / (SUITE_PREFIX + new_run_id(name))
            try:
                path.mkdir()
                return cls(path)
            except FileExistsError:
                continue

    @classmethod
    def open(cls, path: str | Path) -> "SuiteStore":
        store = cls(Path(path))
        if not is_suite(store.path):
            raise StoreError(f"{path} is not a suite directory: it has no {SUITE_FILE}.")
        return store

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def runs_dir(self) -> Path:
        """Where the suite's runs are: beside it."""
        return self.path.parent

    def lock(self) -> None:
        self._lock_fd = hold(self.path / SUITE_LOCK, lambda holder: (
            f"Suite {self.path} is in use by another harness process{holder}: wait for it to end, or stop "
            "it (Ctrl-C), then --resume it."))

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def save(self, record: SuiteRecord) -> None:
        record.updated = utc_now()
        write_atomic(self.path / SUITE_FILE, to_json(record))

    def load(self) -> SuiteRecord:
        path = self.path / SUITE_FILE
        try:
            return from_json(SuiteRecord, path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"Suite file {path} cannot be read: {exc}. It was probably edited or cut "
                             "short; the runs beside it are intact.") from None

    def status(self, record: SuiteRecord) -> Status:
        """A suite recorded as running whose process is gone (its lock free) was interrupted."""
        if record.status is Status.RUNNING and not held(self.path / SUITE_LOCK):
            return Status.INTERRUPTED
        return record.status


def is_suite(path: Path) -> bool:
    return (Path(path) / SUITE_FILE).is_file()
