"""Many candidates at once: builds in parallel on the CPU cores, check and
timing one candidate at a time per GPU (on --device cpu, after the builds).

A build never waits for a GPU, and a GPU never times two candidates at once:
each GPU has its own Evaluator (its own reference process) fed from one queue
of built candidates, so timing starts as soon as the first build is done.
Builds go through a Builds, which several pools (a sweep's problems, a suite's
runs) may share, so that every candidate known is building while GPUs time.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Union

from ..problem import Problem, ProblemError, load_problem
from ..results import Environment, EvalResult, Timing
from .building.builder import Built, Builder
from .evaluate import Evaluator
from .options import EvalOptions
from .processes.cores import build_slots, default_build_jobs
from .processes.protocol import ReferenceReady

Event = Callable[[int, str], None]  # (candidate index, phase)
Finished = Callable[[int, EvalResult], None]  # (candidate index, its result), as each one finishes
Counts = Callable[[int, int, int], None]  # (builds handed in, running, done), at each change
_NOT_YET = object()  # no built candidate waiting in the queue at the moment


class Builds:
    """The build pool: each candidate handed in builds as soon as one of `slots` is free,
    whichever problem it is of. `slots` is `jobs` bounded by host memory (cores.build_slots).

    It counts builds for a live view (`on_change`) and keeps when each ran (`spans`,
    monotonic start and end by candidate path), which says how the builds overlapped."""

    def __init__(self, jobs: int, memory: Optional[int] = None, on_change: Optional[Counts] = None):
        self.slots = build_slots(jobs, memory)
        self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix="build")
        self.on_change = on_change or (lambda total, running, done: None)
        self._changed = threading.Condition()
        self.total = self.running = self.done = 0
        self.spans: list[tuple[str, float, float]] = []

    def __enter__(self) -> "Builds":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drops the builds not started. Those running end on their own (a sweep closes its
        builds once every pool has taken its candidates, so only after an error or an interrupt)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def submit(self, builder: Builder, candidate: str | Path, on_phase: Optional[Callable[[str], None]] = None
               ) -> "Future[Built]":
        """`builder` is the Builder of the candidate's problem and options: building needs
        its problem, cache and limits, not a device or a reference process."""
        self._count(total=1)

        def build() -> Built:
            started = time.monotonic()
            self._count(running=1)
            try:
                return builder.build(candidate, on_phase)
            finally:
                with self._changed:
                    self.spans.append((str(candidate), started, time.monotonic()))
                self._count(running=-1, done=1)

        def dropped(future: "Future[Built]") -> None:
            if future.cancelled():  # by close(): it never ran, and is over all the same for wait_idle
                self._count(done=1)

        future = self._executor.submit(build)
        future.add_done_callback(dropped)
        return future

    def _count(self, total: int = 0, running: int = 0, done: int = 0) -> None:
        with self._changed:
            self.total, self.running, self.done = self.total + total, self.running + running, self.done + done
            counts = (self.total, self.running, self.done)
            self._changed.notify_all()
        self.on_change(*counts)

    def wait_idle(self) -> None:
        """Until every build handed in so far has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self.done >= self.total)


class Pool:
    """Build workers on the CPU cores and one timing slot per GPU, kept across
    batches (the reference processes live as long as the pool).

    `gpus` are physical GPU indices (default: the device of `options` alone). Pools of several
    problems at once share their builds through `builders`, their owner's Builds."""

    def __init__(self, problem: str | Path | Problem, options: EvalOptions,
                 gpus: Optional[Sequence[int]] = None, build_jobs: Optional[int] = None,
                 keep_spare: bool = True, builders: Optional[Builds] = None):
        self.problem = problem if isinstance(problem, Problem) else load_problem(problem)
        slots = [dataclasses.replace(options, gpu=g) for g in gpus] if gpus else [options]
        self.evaluators = [Evaluator(self.problem, slot, keep_spare=keep_spare) for slot in slots]
        self.builder = Builder(self.problem, options)  # builds run on the CPU, for every slot alike
        self.builders = builders or Builds(build_jobs or default_build_jobs(options.device))
        self._own_builders = builders is None

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for evaluator in self.evaluators:
            evaluator.close()
        if self._own_builders:
            self.builders.close()

    def facts(self) -> tuple[ReferenceReady, Environment]:
        """What the reference process found (hardware, inputs, peaks) and the environment:
        starts the first slot's reference process; raises ProblemError for a bad problem."""
        first = self.evaluators[0]
        first.start_reference()
        return first.reference_info, first.environment

    def spawn(self) -> None:
        """Start the processes importing torch, the problem not yet loaded (Evaluator.spawn)."""
        for evaluator in self.evaluators:
            evaluator.spawn()

    def prepare(self) -> None:
        """Start the reference processes now; a broken problem raises ProblemError."""
        for evaluator in self.evaluators:
            evaluator.prepare()

    def stage(self, built: Built, beside_cap: int = 0) -> None:
        """The candidate the first slot will time first imports now (Children.stage)."""
        self.evaluators[0].children.stage(built, beside_cap)

    def reference_time(self) -> Timing:
        """The reference alone on the first slot's device, before any candidate."""
        return self.evaluators[0].time_reference()

    def evaluate(self, candidates: Iterable[Union[str, Path, "Future[Built]"]], on_event: Optional[Event] = None,
                 on_result: Optional[Finished] = None) -> list[EvalResult]:
        """Results in the order given; raises ProblemError for a bad problem. `candidates` may be
        a generator: each one is built as soon as it is drawn, while the next is still coming. A
        candidate may also be its build already handed to this pool's Builds (Builds.submit):
        a sweep builds every problem's candidates ahead, and a pool takes them as they finish."""
        notify = on_event or (lambda index, phase: None)
        finished = on_result or (lambda index, result: None)
        built: "queue.Queue" = queue.Queue()
        results: dict[int, EvalResult] = {}
        failures: list[BaseException] = []
        # a future's waiters wake before its callbacks run: the end of the draw waits for these
        handed_in = threading.Semaphore(0)

        def handed(index: int, future: "Future[Built]") -> None:
            try:
                if future.cancelled():  # the builds were closed under it: nothing to time
                    return
                if future.exception() is not None:
                    failures.append(future.exception())
                else:
                    built.put((index, future.result()))
            finally:
                handed_in.release()

        def time_on(evaluator: Evaluator) -> None:
            item = built.get()
            while item is not None:
                index, outcome = item
                try:  # a candidate already built is taken now, so that it imports during this one's check
                    upcoming = built.get_nowait()
                except queue.Empty:
                    upcoming = _NOT_YET
                try:
                    results[index] = evaluator.run(outcome, lambda p: notify(index, p),
                                                   upcoming[1] if upcoming not in (None, _NOT_YET) else None)
                    notify(index, results[index].verdict.value)
                    finished(index, results[index])
                except BaseException as exc:  # noqa: BLE001
                    failures.append(exc)
                item = built.get() if upcoming is _NOT_YET else upcoming

        timers = [threading.Thread(target=time_on, args=(ev,), daemon=True) for ev in self.evaluators]
        # On a GPU, timing starts with the first build; on the CPU the compilers would share
        # the cores with the timed code, so timing waits for the last build, of any pool
        # sharing the builds.
        timing_waits = self.evaluators[0].options.device == "cpu"
        if not timing_waits:
            _start(timers)
        count, drawn = 0, False
        try:
            submitted = []
            for count, candidate in enumerate(candidates, 1):
                index = count - 1
                future = candidate if isinstance(candidate, Future) else self.builders.submit(
                    self.builder, candidate, lambda p, i=index: notify(i, p))
                future.add_done_callback(lambda f, i=index: handed(i, f))
                submitted.append(future)
            for _ in submitted:
                handed_in.acquire()
            if timing_waits:
                self.builders.wait_idle()
            drawn = True
        finally:
            if not drawn:  # drawing the next candidate failed (an interrupt): nothing more is timed
                while not built.empty():
                    built.get_nowait()
            elif timing_waits:
                _start(timers)
            for _ in timers:
                built.put(None)
            for thread in timers:
                if thread.is_alive():
                    thread.join()
        if failures:
            raise next((f for f in failures if isinstance(f, ProblemError)), failures[0])
        return [results[i] for i in range(count) if i in results]


def _start(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()


def evaluate_batch(problem: str | Path | Problem, candidates: Sequence[str | Path], options: EvalOptions,
                  gpus: Optional[Sequence[int]] = None, build_jobs: Optional[int] = None,
                  on_event: Optional[Event] = None) -> list[EvalResult]:
    """One batch through a pool of its own."""
    with Pool(problem, options, gpus, build_jobs, keep_spare=len(candidates) > len(gpus or [None])) as pool:
        return pool.evaluate(candidates, on_event)
