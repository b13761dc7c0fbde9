"""`harness run --suite DIR`: one optimisation loop per problem file, several at once.

Up to `concurrency` problems run at a time, each in a thread with its own run directory
(as `harness run` makes it), its own proposer and its own Pool (its reference process).
So at most `concurrency` problems wait on the model at once (times --samples); their
builds go through one shared executor; and timing stays one candidate at a time per
device, by the engine's device lock, which serialises the threads of one process as it
does separate processes. The suite's record (runs/suites.py) is saved after every round,
so a killed suite resumes: finished problems are skipped, interrupted runs carried on.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from ..engine.options import EvalOptions
from ..engine.processes.cores import default_build_jobs
from ..engine.pool import Builds, Pool
from ..errors import HarnessError
from ..problem import load_problem
from ..runs.settings import Evaluation, Settings
from ..runs.records import Round, Run, Status
from ..runs.store import RUN_FILE, utc_now
from ..runs.suites import Standing, SuiteProblem, SuiteRecord, SuiteStore
from ..sweep.jobs import SuiteError, problem_levels
from .observer import SuiteObserver
from .prompts import Prompts
from .proposers import kinds
from .start import drive, make_proposer, new_run, reopen, same_problem

# After Ctrl-C, how long the problems' threads get to record their runs as interrupted; a
# thread still waiting on the model then is left (its run reads as interrupted once we exit).
STOP_GRACE_S = 10.0
_STANDINGS = {Status.FINISHED: Standing.FINISHED, Status.FAILED: Standing.FAILED}


def plan(directory: str | Path, settings: Settings) -> list[SuiteProblem]:
    """The suite's problems: the .py files in `directory`, or in its level*/ directories
    (KernelBench's layout), each one the proposer can serve (the files proposer needs candidate
    files for it)."""
    directory = Path(directory)
    kind = kinds.get(settings.proposer)
    if kind.attended:
        raise SuiteError(f"A suite runs without a person at an editor: use {kinds.unattended()} proposer.")
    problems = [SuiteProblem(str(path.resolve()), path.stem, level)
                for level, files in problem_levels(directory).items() for path in files]
    kind.check_suite(settings, problems)
    return problems


def start_suite(directory: str | Path, settings: Settings, evaluation: Evaluation,
                concurrency: int) -> tuple[SuiteStore, SuiteRecord]:
    """A new suite record under settings.runs_dir, locked for this process (release() frees it)."""
    directory = Path(directory).resolve()
    problems = plan(directory, settings)
    # absolute, so the record and its runs are found again from any directory
    settings = dataclasses.replace(settings, runs_dir=str(Path(settings.runs_dir).resolve()))
    Prompts(settings.prompts)  # unusable templates are refused before anything is written
    store = SuiteStore.create(settings.runs_dir, directory.name)
    store.lock()
    record = SuiteRecord(id=store.id, directory=str(directory), settings=settings, evaluation=evaluation,
                         concurrency=concurrency, created=utc_now(), problems=problems)
    store.save(record)
    return store, record


def resume_suite(path: str | Path) -> tuple[SuiteStore, SuiteRecord]:
    """A stopped or killed suite, locked for this process."""
    store = SuiteStore.open(path)
    store.lock()
    try:
        return store, store.load()
    except BaseException:
        store.release()
        raise


class _Watch:
    """One problem's loop observer: reports go to the suite's observer, the record follows each
    round, and once the suite is stopping the next report ends the loop as Ctrl-C would."""

    def __init__(self, suite: "_Suite", entry: SuiteProblem, run: Run):
        self.suite, self.entry, self.run = suite, entry, run

    def _check(self) -> None:
        if self.suite.stop.is_set():
            raise KeyboardInterrupt  # Loop.execute records the run as interrupted

    def phase(self, n: int, sample: int, phase: str) -> None:
        self._check()
        self.suite.observer.phase(self.entry, n, sample, phase)

    def say(self, text: str) -> None:
        self.suite.observer.say(self.entry, text)

    def round_done(self, rnd: Round) -> None:
        self.entry.rounds = len(self.run.rounds)
        self.entry.best = self.run.best.speedup if self.run.best else None
        self.suite.save()
        self.suite.observer.round_done(self.entry, self.run, rnd)
        self._check()


class _Suite:
    def __init__(self, store: SuiteStore, record: SuiteRecord, options: EvalOptions, observer: SuiteObserver,
                 build_jobs: Optional[int], settle: Callable[[Settings], Settings], stop: threading.Event):
        self.store, self.record, self.options, self.observer = store, record, options, observer
        self.settle, self.stop = settle, stop
        self.prompts = Prompts(record.settings.prompts)
        self.build_jobs = build_jobs or default_build_jobs(options.device)
        self.builders = Builds(self.build_jobs)
        self.saving = threading.Lock()
        self.pools: set[Pool] = set()  # in use now: closed at once on Ctrl-C
        self.unexpected: list[BaseException] = []
        self.seconds_before, self.clock_start = record.seconds, time.monotonic()

    def save(self) -> None:
        with self.saving:
            self.record.seconds = self.seconds_before + time.monotonic() - self.clock_start
            self.store.save(self.record)

    def work(self, todo: "queue.Queue[SuiteProblem]") -> None:
        while not self.stop.is_set():
            try:
                entry = todo.get_nowait()
            except queue.Empty:
                return
            try:
                self.one(entry)
            except Exception as exc:  # noqa: BLE001 - the other problems go on; a bug is raised at the end
                if self.stop.is_set():  # the stop broke it (its reference process ended at start)
                    entry.standing, entry.message = Standing.INTERRUPTED, ""
                elif isinstance(exc, HarnessError):
                    entry.standing, entry.message = Standing.FAILED, str(exc)
                else:
                    entry.standing, entry.message = Standing.FAILED, f"{type(exc).__name__}: {exc}"
                    self.unexpected.append(exc)
            self.save()
            self.observer.finished(entry)

    def one(self, entry: SuiteProblem) -> None:
        problem = load_problem(entry.path)
        runs_dir = self.store.runs_dir
        if entry.run and (runs_dir / entry.run / RUN_FILE).is_file():
            store, run, rounds = reopen(runs_dir / entry.run)
            run.settings = self.settle(run.settings)
            run.evaluation = self.record.evaluation
        else:
            own = kinds.get(self.record.settings.proposer).for_problem(self.record.settings, entry)
            settings = dataclasses.replace(own, problem=entry.path, runs_dir=str(runs_dir))
            (store, run), rounds = new_run(settings, self.record.evaluation, problem), []
            entry.run = store.id
        try:
            same_problem(problem, run)
            entry.standing, entry.message = Standing.RUNNING, ""
            self.save()
            self.observer.started(entry, run)
            seconds_before, clock_start = run.seconds, time.monotonic()
            proposer = make_proposer(run.settings, store, rounds, self.prompts, problem)
            try:
                with Pool(problem, self.options, run.evaluation.gpus, self.build_jobs,
                          builders=self.builders) as pool:
                    self.pools.add(pool)
                    try:
                        drive(run=run, store=store, rounds=rounds, proposer=proposer, pool=pool,
                              prompts=self.prompts, problem=problem, trials=self.options.trials,
                              observer=_Watch(self, entry, run),
                              elapsed=lambda: seconds_before + time.monotonic() - clock_start)
                    finally:
                        self.pools.discard(pool)
            finally:
                proposer.close()
        finally:
            store.release()
        entry.standing = _STANDINGS.get(run.status, Standing.INTERRUPTED)
        entry.stop_reason, entry.outcome, entry.message = run.stop_reason, run.outcome, run.message
        entry.rounds, entry.best = len(run.rounds), run.best.speedup if run.best else None


def run_suite(store: SuiteStore, record: SuiteRecord, options: EvalOptions, observer: SuiteObserver, *,
              build_jobs: Optional[int] = None, settle: Callable[[Settings], Settings] = lambda s: s,
              stop: Optional[threading.Event] = None) -> SuiteRecord:
    """Every problem not yet finished, `record.concurrency` at a time, until each run stops or
    `stop` is set (Ctrl-C sets it too); returns the record as saved. `settle` gives a resumed
    run its settings from those it recorded (the command line's flags over them)."""
    suite = _Suite(store, record, options, observer, build_jobs, settle, stop or threading.Event())
    todo: "queue.Queue[SuiteProblem]" = queue.Queue()
    for entry in record.problems:
        if entry.standing is not Standing.FINISHED:
            todo.put(entry)
    record.status = Status.RUNNING
    suite.save()
    # daemon threads: one waiting on a model after Ctrl-C must not hold the process
    threads = [threading.Thread(target=suite.work, args=(todo,), name=f"suite-{i}", daemon=True)
               for i in range(min(record.concurrency, todo.qsize()))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:
        suite.stop.set()
        for pool in list(suite.pools):
            pool.close()  # an evaluation in flight ends now; its loop stops at its next report
        deadline = time.monotonic() + STOP_GRACE_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        suite.builders.close()
    for entry in record.problems:
        if entry.standing is Standing.RUNNING:  # its thread did not get to record the stop
            entry.standing = Standing.INTERRUPTED
    record.status = Status.INTERRUPTED if suite.stop.is_set() else Status.FINISHED
    suite.save()
    if suite.unexpected:
        raise suite.unexpected[0]
    return record
