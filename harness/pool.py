"""Many candidates at once: builds in parallel on the CPU cores, check and
timing one candidate at a time per GPU.

A build never waits for a GPU, and a GPU never times two candidates at once:
each GPU has its own Evaluator (its own reference process) fed from one queue
of built candidates, so timing starts as soon as the first build is done.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional, Sequence

from .evaluate import EvalOptions, Evaluator
from .problem import Problem, ProblemError, load_problem
from .results import EvalResult

Event = Callable[[int, str], None]  # (candidate index, phase)


def default_build_jobs() -> int:
    # nvcc and the C++ wrapper compile in parallel within one build, so half the cores
    return max(1, (os.cpu_count() or 2) // 2)


def evaluate_many(problem: str | Path | Problem, candidates: Sequence[str | Path], options: EvalOptions,
                  gpus: Optional[Sequence[int]] = None, build_jobs: Optional[int] = None,
                  on_event: Optional[Event] = None) -> list[EvalResult]:
    """Evaluate candidates; results come back in the order given.

    `gpus` are physical GPU indices, one timing worker each (default: the
    device of `options` alone). Raises ProblemError for a bad problem."""
    problem = problem if isinstance(problem, Problem) else load_problem(problem)
    notify = on_event or (lambda index, phase: None)
    slots = [dataclasses.replace(options, gpu=g) for g in gpus] if gpus else [options]
    evaluators = [Evaluator(problem, slot, keep_spare=len(candidates) > len(slots)) for slot in slots]
    built: "queue.Queue" = queue.Queue()
    results: list[Optional[EvalResult]] = [None] * len(candidates)
    failures: list[BaseException] = []

    def build(index: int) -> None:
        try:
            built.put((index, evaluators[0].build(candidates[index], lambda p: notify(index, p))))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            failures.append(exc)
            built.put((index, None))

    def time_on(evaluator: Evaluator) -> None:
        while True:
            item = built.get()
            if item is None:
                return
            index, outcome = item
            if outcome is None:
                continue
            try:
                results[index] = evaluator.run(outcome, lambda p: notify(index, p))
                notify(index, results[index].verdict.value)
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

    try:
        timers = [threading.Thread(target=time_on, args=(ev,), daemon=True) for ev in evaluators]
        for thread in timers:
            thread.start()
        with ThreadPoolExecutor(max_workers=build_jobs or default_build_jobs()) as pool:
            list(pool.map(build, range(len(candidates))))
        for _ in timers:
            built.put(None)
        for thread in timers:
            thread.join()
    finally:
        for evaluator in evaluators:
            evaluator.close()
    problems = [f for f in failures if isinstance(f, ProblemError)]
    if problems or failures:
        raise (problems or failures)[0]
    return [r for r in results if r is not None]
