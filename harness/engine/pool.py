"""Many candidates at once: builds in parallel on the CPU cores, check and
timing one candidate at a time per GPU (on --device cpu, after the builds).

A build never waits for a GPU, and a GPU never times two candidates at once:
each GPU has its own Evaluator (its own reference process) fed from one queue
of built candidates, so timing starts as soon as the first build is done.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from ..problem import Problem, ProblemError, load_problem
from ..results import Environment, EvalResult, Timing
from .evaluate import EvalOptions, Evaluator
from .protocol import OracleReady

Event = Callable[[int, str], None]  # (candidate index, phase)
Finished = Callable[[int, EvalResult], None]  # (candidate index, its result), as each one finishes
_NOT_YET = object()  # no built candidate waiting in the queue at the moment


def default_build_jobs() -> int:
    # nvcc and the C++ wrapper compile in parallel within one build, so half the cores
    return max(1, (os.cpu_count() or 2) // 2)


class Pool:
    """Build workers on the CPU cores and one timing slot per GPU, kept across
    batches (the reference processes live as long as the pool).

    `gpus` are physical GPU indices (default: the device of `options` alone). Pools of several
    problems at once share their build workers through `builders`, an executor of their owner's."""

    def __init__(self, problem: str | Path | Problem, options: EvalOptions,
                 gpus: Optional[Sequence[int]] = None, build_jobs: Optional[int] = None,
                 keep_spare: bool = True, builders: Optional[ThreadPoolExecutor] = None):
        self.problem = problem if isinstance(problem, Problem) else load_problem(problem)
        slots = [dataclasses.replace(options, gpu=g) for g in gpus] if gpus else [options]
        self.evaluators = [Evaluator(self.problem, slot, keep_spare=keep_spare) for slot in slots]
        self.build_jobs = build_jobs or default_build_jobs()
        self.builders = builders

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for evaluator in self.evaluators:
            evaluator.close()

    def facts(self) -> tuple[OracleReady, Environment]:
        """What the reference process found (hardware, inputs, peaks) and the environment:
        starts the first slot's reference process; raises ProblemError for a bad problem."""
        first = self.evaluators[0]
        first.start_oracle()
        return first.oracle_info, first.environment

    def spawn(self) -> None:
        """Start the processes importing torch, the problem not yet loaded (Evaluator.spawn)."""
        for evaluator in self.evaluators:
            evaluator.spawn()

    def prepare(self) -> None:
        """Start the reference processes now; a broken problem raises ProblemError."""
        for evaluator in self.evaluators:
            evaluator.prepare()

    def reference_time(self) -> Timing:
        """The reference alone on the first slot's device, before any candidate."""
        return self.evaluators[0].time_reference()

    def evaluate(self, candidates: Iterable[str | Path], on_event: Optional[Event] = None,
                 on_result: Optional[Finished] = None) -> list[EvalResult]:
        """Results in the order given; raises ProblemError for a bad problem. `candidates` may be
        a generator: each one is built as soon as it is drawn, while the next is still coming."""
        notify = on_event or (lambda index, phase: None)
        finished = on_result or (lambda index, result: None)
        built: "queue.Queue" = queue.Queue()
        results: dict[int, EvalResult] = {}
        failures: list[BaseException] = []

        def build(index: int, candidate: str | Path) -> None:
            try:
                built.put((index, self.evaluators[0].build(candidate, lambda p: notify(index, p))))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failures.append(exc)

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
        # the cores with the timed code, so timing waits for the last build.
        timing_waits = self.evaluators[0].options.device == "cpu"
        if not timing_waits:
            _start(timers)
        count, drawn = 0, False
        try:
            with nullcontext(self.builders) if self.builders else ThreadPoolExecutor(self.build_jobs) as builders:
                submitted = []
                for count, candidate in enumerate(candidates, 1):
                    submitted.append(builders.submit(build, count - 1, candidate))
                wait(submitted)  # a shared executor is not shut down here, so its end would not wait
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


def evaluate_many(problem: str | Path | Problem, candidates: Sequence[str | Path], options: EvalOptions,
                  gpus: Optional[Sequence[int]] = None, build_jobs: Optional[int] = None,
                  on_event: Optional[Event] = None) -> list[EvalResult]:
    """One batch through a pool of its own."""
    with Pool(problem, options, gpus, build_jobs, keep_spare=len(candidates) > len(gpus or [None])) as pool:
        return pool.evaluate(candidates, on_event)
