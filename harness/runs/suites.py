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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .records import Status
from .settings import Evaluation, Settings
from .store import Store, utc_now

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


class SuiteStore(Store):
    kind, record_file, record_type, lock_file, prefix = "suite", SUITE_FILE, SuiteRecord, SUITE_LOCK, SUITE_PREFIX

    @property
    def runs_dir(self) -> Path:
        """Where the suite's runs are: beside it."""
        return self.path.parent

    def _in_use(self, holder: str) -> str:
        return (f"Suite {self.path} is in use by another harness process{holder}: wait for it to end, or stop "
                "it (Ctrl-C), then --resume it.")

    def save(self, record: SuiteRecord) -> None:
        record.updated = utc_now()
        self._save(record)

    def load(self) -> SuiteRecord:
        return self._load()

    def _unreadable(self, path: Path, exc: Exception) -> str:
        return (f"Suite file {path} cannot be read: {exc}. It was probably edited or cut short; the runs beside "
                "it are intact.")


def is_suite(path: Path) -> bool:
    return (Path(path) / SUITE_FILE).is_file()
