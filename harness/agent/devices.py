"""The judge's side of the devices: one pool per problem and evaluation options, kept warm between
calls (each holds its reference process), and the turns every call takes, so that calls arriving
together share the host and its GPUs as `harness eval` shares them among its candidates.

On every device one candidate is checked and timed at a time, and builds run ahead of it. Where the
timing has no cores of its own (--device cpu, or a GPU host too small to keep a pair aside:
cores.split_cores), no build runs while a candidate is timed and timing waits for the builds in
flight, as the pool does on the CPU. A call that waits is told whom for, and a cancelled call
stops waiting. Another harness process (a second server) is kept apart by the engine's device lock."""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence

from ..engine.building.builder import builds_of
from ..engine.processes.cores import build_slots, default_build_jobs, split_cores
from ..engine.processes.device_lock import device_key
from ..engine.evaluate import Evaluator
from ..engine.options import EvalOptions
from ..engine.phases import Notify, quiet
from ..engine.pool import Pool
from ..engine.profiling.profile import Profiler
from ..problem import Problem
from ..results import Timing, to_json
from ..runs.settings import Evaluation

# Pools kept warm at once: each holds a reference process (and on a GPU its tensors); the least
# recently used idle one is closed past this.
MAX_POOLS = 4
WAIT_STEP_S = 0.2  # how often a waiting call looks whether it was cancelled


class Cancelled(Exception):
    """The call was cancelled: its work stops at the next step, its processes ended."""


class Job:
    """One call's work, as the thread doing it and the server see it: it tells `on_phase` what it is
    doing, and cancel() (from the server's side) ends the processes it waits on."""

    def __init__(self, on_phase: Notify = quiet):
        self._said = on_phase
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        # what cancel() ends: the builds of the thread doing the work, the worker of the evaluator
        # running its candidate, the profiler's child
        self._thread: Optional[int] = None
        self._evaluator: Optional[Evaluator] = None
        self._profiler: Optional[Profiler] = None

    def phase(self, doing: str = "") -> None:
        """Told by the engine as each step begins: where the call was cancelled, the step is not taken."""
        if self.cancelled.is_set():
            raise Cancelled()
        if doing:
            self._said(doing)

    @contextmanager
    def watching(self, evaluator: Optional[Evaluator] = None, profiler: Optional[Profiler] = None) -> Iterator[None]:
        """The block whose processes cancel() ends: this thread's builds, and `evaluator`'s or `profiler`'s."""
        with self._lock:
            before = self._thread, self._evaluator, self._profiler
            self._thread = threading.get_ident()
            self._evaluator, self._profiler = evaluator or self._evaluator, profiler or self._profiler
        try:
            self.phase()
            yield
            self.phase()  # a cancelled step may end as a verdict: the call ends as cancelled all the same
        finally:
            with self._lock:
                self._thread, self._evaluator, self._profiler = before

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            for child in builds_of(self._thread) if self._thread else []:
                child.end()
            worker = self._evaluator.children.current if self._evaluator else None
            if worker:
                worker.end()
            if self._profiler:
                self._profiler.stop()


@dataclass
class Warm:
    """A pool kept between calls, with what was measured of its reference once."""

    pool: Pool
    users: int = 0
    reference: dict[str, Timing] = field(default_factory=dict)  # the reference alone, by clock


class Devices:
    """The warm pools and the turns on the devices they time on."""

    def __init__(self, base: EvalOptions, jobs: Optional[int] = None):
        self.base, self.jobs = base, jobs
        self._pools: OrderedDict[tuple, Warm] = OrderedDict()
        self._turns = threading.Condition()
        self._timing: set[str] = set()  # device keys a call times on now
        self._building = 0
        self._slots = build_slots(jobs or default_build_jobs(base.device))  # builds at once, as a pool runs them
        self._waiting = 0  # calls waiting to time: no build starts meanwhile where the two are kept apart
        # builds and timing share every core here: they never overlap
        self._apart = not split_cores(base.device).timing

    @contextmanager
    def pool(self, problem: Problem, evaluation: Evaluation) -> Iterator[Warm]:
        """The warm pool of `problem` under `evaluation`, started on first use."""
        key = (problem.path, problem.sha256, to_json(evaluation, indent=None))
        with self._turns:
            warm = self._pools.get(key)
            if warm is None:
                options = evaluation.options(self.base)
                warm = self._pools[key] = Warm(Pool(problem, options, evaluation.gpus, self.jobs))
            self._pools.move_to_end(key)
            warm.users += 1
            idle = [k for k, w in self._pools.items() if not w.users][:max(0, len(self._pools) - MAX_POOLS)]
            closing = [self._pools.pop(k).pool for k in idle]
        for pool in closing:
            pool.close()
        try:
            yield warm
        finally:
            with self._turns:
                warm.users -= 1

    @contextmanager
    def building(self, job: Job) -> Iterator[None]:
        with self._turns:
            self._wait(job, lambda: self._building < self._slots
                       and not (self._apart and (self._timing or self._waiting)),
                       lambda: f"waiting to build: {self._building} build(s) at once here" if self._building
                       >= self._slots else "waiting to build: a candidate is being timed on these cores")
            self._building += 1
        try:
            yield
        finally:
            with self._turns:
                self._building -= 1
                self._turns.notify_all()

    @contextmanager
    def timing(self, evaluators: Sequence[Evaluator], job: Job) -> Iterator[Evaluator]:
        """The first of `evaluators` whose device no other call times on, held for the block."""
        keys = {device_key(e.options.device, e.options.gpu): e for e in evaluators}
        with self._turns:
            self._waiting += 1
            try:
                self._wait(job, lambda: any(k not in self._timing for k in keys)
                           and not (self._apart and self._building),
                           lambda: "waiting for the device: another call's candidate is timed there"
                           if all(k in self._timing for k in keys) else
                           "waiting for the builds in flight to end: they share the timing's cores")
            finally:
                self._waiting -= 1
            key = next(k for k in keys if k not in self._timing)
            self._timing.add(key)
        try:
            yield keys[key]
        finally:
            with self._turns:
                self._timing.discard(key)
                self._turns.notify_all()

    def _wait(self, job: Job, ready: Callable[[], bool], why: Callable[[], str]) -> None:
        """Until `ready()` (the turns' condition held), the job told `why()` once where it must wait;
        a cancelled job stops waiting."""
        if not ready():
            job.phase(why())
        while not ready():
            if job.cancelled.is_set():
                raise Cancelled()
            self._turns.wait(WAIT_STEP_S)

    def close(self) -> None:
        with self._turns:
            pools = [warm.pool for warm in self._pools.values()]
            self._pools.clear()
        for pool in pools:
            pool.close()
