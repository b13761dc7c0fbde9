"""`harness sweep`: every (problem, candidate) pair through the engine's pool, one timing
worker per GPU, each GPU taking the next problem from one queue.

Every candidate of every problem is handed to one shared build pool (engine.pool.Builds) as
soon as the job list is known, so the cores build while the GPUs time, and a problem's pool
takes its candidates as their builds finish. Per problem a Pool (its reference process, one
candidate timed at a time). A GPU works SPAWN_AHEAD problems ahead: once the current problem's
first candidate is checked, the problems after the next have their reference processes and first
workers start importing torch, and the next problem's reference, its imports done by then, loads its
problem beside that check, never beside a timing (it takes the device's lock), unless the current
problem needs much of the GPU's memory; then it loads once the current one has ended, beside its
first worker. So a problem costs little more than its own timing.
On the CPU no reference starts ahead, since the cores are what is timed, and the first timing
waits for the last build.
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..engine.processes.cores import default_build_jobs
from ..engine.building.builder import Built, Builder
from ..engine.children import NoBackward
from ..engine.processes.footprint import DoesNotFit, footprint
from ..engine.options import EvalOptions
from ..engine.phases import Phase as Step
from ..engine.pool import Builds, Counts, Pool
from ..problem import Problem, ProblemError, load_problem
from ..results import EvalResult
from .jobs import Job
from .records import EventLog, SweepRecord, ResultLog, problem_failure, record_of

Phase = Callable[[str, str], None]  # (slot name, what it is doing)
Recorded = Callable[[SweepRecord], None]


def pending(jobs: Sequence[Job], log: ResultLog) -> list[Job]:
    """The jobs without a record yet; a job listed twice is evaluated once."""
    done = {r.key for r in log.records}
    left, seen = [], set()
    for job in jobs:
        if job.key not in done and job.key not in seen:
            seen.add(job.key)
            left.append(job)
    return left


def by_problem(jobs: Sequence[Job]) -> list[list[Job]]:
    groups: dict[tuple[str, Path], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.level, job.problem), []).append(job)
    return list(groups.values())


def loadable(group: list[Job]) -> Optional[Problem]:
    """The group's problem, read without running it, to build its candidates ahead; None where
    it cannot be read: nothing is built ahead then, and its pool says why, in a record per candidate."""
    try:
        return load_problem(group[0].problem)
    except ProblemError:
        return None


# the next problem's reference starts beside the current one only while the current one needs
# less than this share of the memory its device had free: two big problems side by side
# could each run the other out of memory
PREFETCH_SHARE = 0.25
# Problems a GPU's slot has started beyond the current one. A problem's processes take 3-4 s to
# import torch on a 16-core H100 host while a level 1 copy is done in about 2: two ahead left the
# slot waiting for imports on every other problem, three on a run of fast ones (an H200: 14 of 64
# level 1 copies waited 0.1-2.6 s). Each holds a CUDA context (about 0.5 GB) and 1 GB of host memory.
SPAWN_AHEAD = 5


def _leaves_room(pool: Pool, share: float = PREFETCH_SHARE, beside: int = 0) -> bool:
    """Whether the problem of `pool` needs at most `share` of the memory its load found free, with `beside` bytes more."""
    ready = pool.evaluators[0].reference_info
    return not ready.available_bytes or footprint(ready) + beside <= share * ready.available_bytes


# Where the next problem cannot load beside the current one, its first worker still imports its candidate
# beside it, and builds its models there where they take at most this much of the device's memory (more
# waits for its turn): a level 1 activation's copy took 0.34-0.56 s from its turn to ready on an H200.
STAGE_BESIDE_BYTES = 1 << 30


# the two problems' most memory together at most this share of what the current one's load found free
SIDE_BY_SIDE_SHARE = 0.8


def _side_by_side(current: Opened, upcoming: Optional[Opened]) -> bool:
    """Whether the next problem may start while the current one checks its other shapes: the current
    one times nothing more (one candidate), the next one loaded beside it, and the most memory each
    can hold (footprint) fits the device together, so neither can run the other out of it."""
    if upcoming is None or not upcoming.loaded or len(current.group) != 1 or upcoming.refused_beside():
        return False
    if upcoming.error is not None or current.pool is None or upcoming.pool is None:
        return False
    now, after = current.pool.evaluators[0].reference_info, upcoming.pool.evaluators[0].reference_info
    return bool(now.available_bytes) and footprint(now) + footprint(after) <= SIDE_BY_SIDE_SHARE * now.available_bytes


def _close_after(evaluating: threading.Thread, opened: Opened) -> None:
    """The problem's pool closed once its evaluation, going on beside the next problem, is over."""
    evaluating.join()
    opened.close()


class Opened:
    """A problem's pool, started in the background: its processes import torch (seconds, no GPU
    memory). Loaded (or once told load()), its reference then loads the problem as soon as no
    timing runs on the device; else when the pool evaluates, beside its first worker."""

    def __init__(self, group: list[Job], options: EvalOptions, gpu: Optional[int], builders: Builds,
                 loaded: bool = True, prebuilt: Optional[list["Future[Built]"]] = None):
        self.group, self.started, self.loaded = group, time.monotonic(), False
        self.beside = False  # loaded while another problem held the device's memory
        self.prebuilt = prebuilt  # the group's builds, handed to `builders` already
        self.pool: Optional[Pool] = None
        self.error: Optional[BaseException] = None
        self._threads = [threading.Thread(target=self._open, args=(options, gpu, builders), daemon=True)]
        self._threads[0].start()
        if loaded:
            self.load()

    @property
    def candidates(self) -> list:
        return self.prebuilt or [job.candidate for job in self.group]

    def _open(self, options: EvalOptions, gpu: Optional[int], builders: Builds) -> None:
        try:
            self.pool = Pool(self.group[0].problem, options, [gpu] if gpu is not None else None,
                             keep_spare=len(self.group) > 1, builders=builders)
            self.pool.spawn()
        except BaseException as exc:  # noqa: BLE001 - handed to the slot's thread in ready()
            self.error = exc

    def load(self, stage: bool = False, beside: bool = False) -> None:
        """Its reference loads the problem now, in the background, once its imports are done; with
        `stage`, its first candidate's worker imports it and builds the models meanwhile (Pool.stage), paused
        while a candidate is timed on the device.
        `beside`: another problem's processes hold memory on the device meanwhile."""
        opening = self._threads[0]

        def prepare() -> None:
            opening.join()
            if self.pool is not None and self.error is None:
                try:
                    if stage:
                        self._stage_first(0)
                    self.pool.prepare()
                except BaseException as exc:  # noqa: BLE001 - handed to the slot's thread in ready()
                    self.error = exc

        self.loaded, self.started, self.beside = True, time.monotonic(), beside
        self._threads.append(threading.Thread(target=prepare, daemon=True))
        self._threads[-1].start()

    def stage(self, beside_cap: int) -> None:
        """Its first candidate's worker imports it and builds its models now, in the background, its
        reference not loaded (the problem before needs the memory): only models within `beside_cap`
        bytes of the device's memory, others at its turn (Children.stage)."""
        opening = self._threads[0]

        def stage() -> None:
            opening.join()
            if self.pool is not None and self.error is None:
                self._stage_first(beside_cap)

        self._threads.append(threading.Thread(target=stage, daemon=True))
        self._threads[-1].start()

    def _stage_first(self, beside_cap: int) -> None:
        """Its first candidate, built already, staged in its pool (Pool.stage); none still building, and
        none whose build raised (the pool meets that when it takes the candidate)."""
        first = self.prebuilt[0] if self.prebuilt else None
        if first is not None and first.done() and not first.cancelled() and first.exception() is None:
            self.pool.stage(first.result(), beside_cap)

    def refused_beside(self) -> bool:
        """Whether its load, beside another problem, found too little device memory free: a refusal
        of the memory the other one held, not of this problem. Waits for the load."""
        for thread in self._threads:
            thread.join()
        return self.beside and isinstance(self.error, DoesNotFit)

    def ready(self) -> Pool:
        """Its pool, loaded; a refusal beside another problem is loaded again, alone (that one has ended)."""
        if self.refused_beside():
            self.error, self.beside = None, False
            try:
                self.pool.prepare()
            except BaseException as exc:  # noqa: BLE001 - raised below as any failed load's
                self.error = exc
        if not self.loaded:  # its seconds count from now, not from the wait beside the problem before
            self.started = time.monotonic()
        if self.error:
            raise self.error
        assert self.pool is not None
        return self.pool

    def close(self) -> None:
        for thread in self._threads:
            thread.join()
        if self.pool:
            self.pool.close()


def join(thread: threading.Thread) -> None:
    """Until the thread has ended, in short waits, so that Ctrl-C and SIGTERM reach the waiting thread at once."""
    while thread.is_alive():
        thread.join(0.5)


def run_all(threads: list[threading.Thread]) -> None:
    """Starts the threads and waits for them all."""
    for thread in threads:
        thread.start()
    for thread in threads:
        join(thread)


class Sweep:
    """`build_memory`: bytes of host memory the builds may take (default: what the host has
    available when the sweep starts); with `build_jobs`, it bounds the builds at once."""

    def __init__(self, options: EvalOptions, gpus: Optional[Sequence[int]], log: ResultLog,
                 build_jobs: Optional[int] = None, on_record: Optional[Recorded] = None,
                 on_phase: Optional[Phase] = None, on_builds: Optional[Counts] = None,
                 build_memory: Optional[int] = None):
        self.options, self.log = options, log
        self.slots: list[Optional[int]] = list(gpus) if gpus and options.device != "cpu" else [None]
        self.build_jobs, self.build_memory = build_jobs, build_memory
        self.on_record = on_record or (lambda record: None)
        self._told = on_phase or (lambda slot, text: None)
        self.events: Optional[EventLog] = None  # while run() runs
        self.on_builds = on_builds
        self.builds: Optional[Builds] = None  # while run() runs, and after it, for its spans
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._closing: list[threading.Thread] = []  # problems' pools ending behind the next one (_slot)

    @property
    def where(self) -> str:
        """Where the evaluations run, for a person."""
        return ", ".join(f"GPU {g}" for g in self.slots) if self.slots != [None] else self.options.device

    def run(self, jobs: Sequence[Job]) -> list[SweepRecord]:
        """Evaluates what the log lacks; returns every record, earlier ones included."""
        groups: "queue.Queue[tuple[list[Job], Optional[list]]]" = queue.Queue()
        self.builds = Builds(self.build_jobs or default_build_jobs(self.options.device), self.build_memory,
                             self.on_builds)
        self.events = EventLog(self.log.path.parent)
        try:
            left = pending(jobs, self.log)
            for group in by_problem(left):
                groups.put((group, self._build_ahead(group)))
            run_all([threading.Thread(target=self._slot, args=(gpu, groups), daemon=True) for gpu in self.slots])
        finally:
            for thread in self._closing:
                thread.join()
            self.builds.close()
            self.events.close()
        if self._errors:
            raise self._errors[0]
        return list(self.log.records)

    def on_phase(self, slot: str, text: str) -> None:
        """A slot's step, told to the live view and written to the events log."""
        if self.events:
            self.events.append(slot, text)
        self._told(slot, text)

    def _build_ahead(self, group: list[Job]) -> Optional[list["Future[Built]"]]:
        """The group's builds, handed to the sweep's Builds now; None where its problem cannot
        be loaded."""
        problem = loadable(group)
        if problem is None:
            return None
        builder = Builder(problem, replace(self.options, gpu=self.slots[0]))
        assert self.builds is not None
        return [self.builds.submit(builder, job.candidate) for job in group]

    def _take(self, groups: "queue.Queue[tuple[list[Job], Optional[list]]]", gpu: Optional[int],
              loaded: bool = True) -> Optional[Opened]:
        if self._errors:
            return None
        try:
            group, prebuilt = groups.get_nowait()
        except queue.Empty:
            return None
        assert self.builds is not None
        return Opened(group, replace(self.options, gpu=gpu), gpu, self.builds, loaded, prebuilt)

    def _slot(self, gpu: Optional[int], groups: "queue.Queue[tuple[list[Job], Optional[list]]]") -> None:
        """On a GPU SPAWN_AHEAD problems ahead: the next one's reference loads while the current one's
        first candidate is checked, and the ones after it import torch meanwhile, so their seconds of
        imports are over by the time each is next. Where both fit the device at once (_side_by_side),
        the next one starts once the current one's first candidate is timed: its start and check beside
        the current one's other shapes, its timing once those are over (Children.untimed)."""
        name = "cpu" if gpu is None else f"gpu {gpu}"
        upcoming = self._take(groups, gpu)
        ahead: deque[Opened] = deque()  # opened after `upcoming`, importing, not loaded

        def open_ahead() -> None:
            while len(ahead) < SPAWN_AHEAD - 1:
                opened = self._take(groups, gpu, loaded=False)
                if opened is None:
                    break
                ahead.append(opened)

        if gpu is not None and upcoming is not None:
            open_ahead()  # importing beside the first one's start
        while upcoming is not None:
            current, upcoming = upcoming, None
            timed = threading.Event()  # its first candidate timed, or it ended

            def prefetch(pool: Pool) -> None:
                nonlocal upcoming
                if gpu is not None:
                    upcoming = ahead.popleft() if ahead else self._take(groups, gpu, loaded=False)
                    if upcoming is not None and _leaves_room(pool):
                        # with one candidate here, the next one's first worker imports it and builds its models
                        # now too (0.5 s a level 1 copy), paused while this one is timed (Children.stage)
                        upcoming.load(stage=len(current.group) == 1, beside=True)
                    elif upcoming is not None and len(current.group) == 1 and \
                            _leaves_room(pool, SIDE_BY_SIDE_SHARE, STAGE_BESIDE_BYTES):
                        upcoming.stage(STAGE_BESIDE_BYTES)
                    if upcoming is not None:
                        open_ahead()

            evaluating = threading.Thread(target=self._evaluate, args=(name, current, prefetch, timed), daemon=True)
            evaluating.start()
            while not timed.wait(0.5):  # short waits, as join's
                pass
            if evaluating.is_alive() and _side_by_side(current, upcoming) and not self._errors:
                self._behind(_close_after, evaluating, current)  # its other shapes go on beside the next problem
                continue
            join(evaluating)
            if upcoming is not None and upcoming.loaded and not self._errors and not upcoming.refused_beside():
                # the next problem is loaded beside this one already (it fit): this one's processes
                # end behind it (a reference's exit, 0.1-0.2 s, held every problem up); one that
                # did not fit beside it loads again once these have ended (Opened.ready)
                self._behind(current.close)
            else:
                current.close()
            if self._errors:
                for opened in (upcoming, *ahead):
                    if opened is not None:
                        opened.close()
                break
            if upcoming is None:  # no candidate of this one was checked: nothing was opened for the next
                upcoming = ahead.popleft() if ahead else self._take(groups, gpu)
        self.on_phase(name, "done")

    def _behind(self, target: Callable, *args) -> None:
        """A problem's end, in a thread of its own that run() waits for before it returns."""
        self._closing.append(threading.Thread(target=target, args=args, daemon=True))
        self._closing[-1].start()

    def _evaluate(self, name: str, opened: Opened, prefetch: Callable[[Pool], None], timed: threading.Event) -> None:
        try:
            evaluate_problem(name, opened, self._record, self.on_phase, prefetch, timed.set)
        except BaseException as exc:  # noqa: BLE001 - the main thread raises it
            self._errors.append(exc)
        finally:
            timed.set()

    def _record(self, record: SweepRecord) -> None:
        with self._lock:
            self.log.append(record)
            self.on_record(record)


def evaluate_problem(name: str, opened: Opened, on_record: Recorded, on_phase: Phase,
                     prefetch: Optional[Callable[[Pool], None]] = None,
                     timed: Optional[Callable[[], None]] = None) -> None:
    """One problem's candidates through its pool, a record for each as it finishes; a problem that
    fails itself is a problem_failure record for each candidate it had not finished.

    `prefetch` is told once, when the first candidate's check begins (the reference is ready then
    and has said how much memory it holds) or it ended without one: the next problem's reference
    loads during the check, holding the device's lock (the timing after waits for it where the load
    is longer: its median is 0.1-0.2 s on an H200, the check's 0.4 s), and its first worker
    imports, paused while the timing runs. `timed` is told once, when the first candidate's timing
    is over (its other shapes begin) or it ended without one: the next problem may start then."""
    group = opened.group
    on_phase(name, f"{group[0].level}/{group[0].problem.stem}: starting the reference")
    finished: set[int] = set()
    pool: Optional[Pool] = None

    def tell(shapes: bool) -> None:
        nonlocal prefetch, timed
        if prefetch and pool:
            prefetch, told = None, prefetch
            told(pool)
        if shapes and timed:
            timed, told_timed = None, timed
            told_timed()

    def on_result(index: int, result: EvalResult) -> None:
        finished.add(index)
        on_record(record_of(group[index], result, pool.evaluators[0].reference_info if pool else None))
        tell(shapes=True)

    def on_event(index: int, phase: str) -> None:
        if phase in (Step.CHECK.doing, Step.SHAPES.doing):
            tell(shapes=phase == Step.SHAPES.doing)
        on_phase(name, f"{group[index].level}/{group[index].problem.stem} {group[index].label}: {phase}")

    try:
        pool = opened.ready()
        pool.evaluate(opened.candidates, on_event, on_result)
    except ProblemError as exc:  # the problem's failure, not its candidates'
        for build in opened.prebuilt or []:  # its builds not started yet leave the cores to other problems'
            build.cancel()
        for index, job in enumerate(group):
            if index not in finished:
                on_record(problem_failure(job, str(exc), time.monotonic() - opened.started,
                                          skipped=isinstance(exc, NoBackward)))
