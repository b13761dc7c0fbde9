"""Many candidates of many problems, for a trainer that rewards a model's kernels: a judge that
streams each candidate's record as it finishes, resumes from a results log, and stays warm
between calls.

A request is (problem, candidate): the candidate a file (a Path) or its source text (a str,
written to a file of the judge's own, since the engine builds from files). Records are the
sweep's (records.SweepRecord), appended to its results log (records.ResultLog) where a folder is
given; a request recorded there already is not evaluated again.

Between calls the judge keeps a Pool per (problem, options, GPU): its reference process, and a
worker with torch imported for the next candidate. Builds go through one build pool (and the
build cache on disk), so a call for problems seen before starts no process but its candidates'.

One thread per GPU (one for the CPU) evaluates one problem's candidates at a time, one candidate
at a time, as the sweep does. It takes a problem whose pool it holds first, then one no GPU
holds, then, rather than idle, one held on another GPU (starting a second reference process
for it). A problem with more than its share of a call's candidates is split over the GPUs.
"""
from __future__ import annotations

import atexit
import hashlib
import queue
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

from ..device import require_cuda
from ..engine.building.builder import Built, Builder
from ..engine.processes.cores import default_build_jobs
from ..engine.options import EvalOptions
from ..engine.pool import Builds, Pool
from ..errors import HarnessError
from ..files import write_atomic
from ..problem import Problem, ProblemError, load_problem
from .audit import AuditItem, AuditRecord, audit, past_build
from .jobs import Job
from .records import ResultLog, SweepRecord
from .sweep import by_problem, evaluate_problem, join, pending

# Pools kept open between calls, least recently used closed first: each holds its reference
# process (the problem's inputs on its device) and a spare worker.
MAX_POOLS = 16
# Requests remembered for Judge.audit (a text candidate's source among them), the oldest forgotten first
MAX_KEPT_REQUESTS = 100_000
_DONE = object()  # a slot's thread has ended


class BatchError(HarnessError):
    """A request or a call the judge cannot take; the message is one paragraph for a person."""


@dataclass(frozen=True)
class Request:
    """One candidate for one problem. `candidate` is a file (a Path) or the candidate's source text
    (a str). `label` names it in its record (SweepRecord.candidate): by default the file's path as
    given, or "sha256:" and 16 hex digits of the text's hash, so that the same text is known again
    on resume."""

    problem: Path
    candidate: Union[Path, str]
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "problem", Path(self.problem))
        if not isinstance(self.candidate, (Path, str)):
            raise BatchError(f"Request for {self.problem}: the candidate is a {type(self.candidate).__name__}; "
                             "give a pathlib.Path for a file or a str holding the source text.")
        if isinstance(self.candidate, str) and "\n" not in self.candidate and self.candidate.endswith(".py"):
            raise BatchError(f"Request for {self.problem}: the candidate {self.candidate!r} is a str naming a "
                             "file, and a str is read as source text; pass pathlib.Path(...) to evaluate the file.")
        if not self.label:
            label = (str(self.candidate) if isinstance(self.candidate, Path)
                     else f"sha256:{_digest(self.candidate)[:16]}")
            object.__setattr__(self, "label", label)

    @property
    def level(self) -> str:
        """The problem's folder, as a sweep names a level (level1 for level1/19_ReLU.py)."""
        return self.problem.resolve().parent.name

    @property
    def key(self) -> tuple[str, str, str]:
        """Its record's key (SweepRecord.key)."""
        return (self.level, self.problem.stem, self.label)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def as_request(item: Union[Request, Sequence]) -> Request:
    """A Request, or a (problem, candidate[, label]) tuple read as one."""
    if isinstance(item, Request):
        return item
    if isinstance(item, (tuple, list)) and len(item) in (2, 3):
        return Request(*item)
    raise BatchError(f"A request is a harness.Request or a (problem, candidate[, label]) tuple, not "
                     f"{str(item)[:80]!r}; a candidate is a pathlib.Path to a file or a str of source text.")


@dataclass
class _Chunk:
    """Some of one problem's requests of a call, for one slot: what sweep.evaluate_problem takes."""

    key: tuple  # (problem path, its hash, options): a pool's key, less its slot
    problem: Optional[Problem]
    options: EvalOptions
    group: list[Job]
    prebuilt: Optional[list["Future[Built]"]]
    error: Optional[ProblemError] = None  # the problem could not be loaded
    pool: Optional[Pool] = None
    started: float = field(default_factory=time.monotonic)

    @property
    def candidates(self) -> list:
        return self.prebuilt or [job.candidate for job in self.group]

    def ready(self) -> Pool:
        if self.error:
            raise self.error
        assert self.pool is not None
        return self.pool


class Judge:
    """Evaluates requests call after call, keeping per problem what can be kept; one call at a time.

    `options` are every call's unless it gives its own; `gpus` are physical GPU indices, one timing
    slot each (default: the options' device alone); `max_pools` bounds the pools kept between calls."""

    def __init__(self, options: Optional[EvalOptions] = None, gpus: Optional[Sequence[int]] = None,
                 build_jobs: Optional[int] = None, max_pools: int = MAX_POOLS):
        self.options = options or EvalOptions()
        self.gpus = list(gpus or [])
        self.build_jobs, self.max_pools = build_jobs, max_pools
        self.opened = 0  # pools opened over the judge's life: each starts its problem's reference process
        self.closed = False
        self._builds: Optional[Builds] = None  # made by the first call, for its device's cores
        self._pools: "OrderedDict[tuple, Pool]" = OrderedDict()  # least recently used first
        self._busy: set[tuple] = set()
        self._lock = threading.Lock()
        self._calling = False
        self._scratch: Optional[Path] = None  # a folder per call: candidates given as text, a log if none given
        # the requests of recent calls by record key, for audit(): a text's file goes with its call
        self._asked: "OrderedDict[tuple, Request]" = OrderedDict()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Ends every process the judge keeps and removes its files; a call in flight ends too."""
        with self._lock:
            self.closed = True
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()
        if self._builds:
            self._builds.close()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def evaluate(self, requests: Iterable[Union[Request, Sequence]], options: Optional[EvalOptions] = None,
                 log: Optional[Union[str, Path]] = None) -> Iterator[SweepRecord]:
        """Each request's record, as it finishes. `log`: a results folder (its results.jsonl, as
        `harness sweep` writes it); records there for these requests come first, unevaluated, and
        each new one is appended. Requests with the same key (Request.key) are evaluated once.

        The requests are read, and texts written to files, now; the work starts when the
        iterator is first advanced. Leaving the loop early cancels the builds not started; the
        candidates already built are evaluated (and logged) before it returns. A problem that
        fails itself is a `problem_error` record per candidate; a failure of the harness or the
        machine raises."""
        if self.closed:
            raise BatchError("This judge is closed: make a new Judge (evaluate_many makes its own anew).")
        options = options or self.options
        require_cuda(options.device)  # now, not after the builds were handed in
        asked = [as_request(item) for item in requests]
        for request in asked:
            self._asked[request.key] = request
            self._asked.move_to_end(request.key)
        while len(self._asked) > MAX_KEPT_REQUESTS:
            self._asked.popitem(last=False)
        scratch = Path(tempfile.mkdtemp(prefix="call-", dir=self._scratch_dir()))
        jobs = [self._job(request, scratch) for request in asked]
        return self._stream(jobs, options, Path(log) if log else scratch, scratch)

    def audit(self, records: Iterable[SweepRecord], options: Optional[EvalOptions] = None,
              on_record: Optional[Callable[[AuditRecord], None]] = None) -> list[AuditRecord]:
        """A second opinion on records this judge gave (sweep/audit.py): each candidate judged again in
        processes of the audit's own, every invariant at its strictest; `agree` on each, or the check that
        disagrees. A trainer audits the rewards it paid, the highest first (docs/batch.md)."""
        if self.closed:
            raise BatchError("This judge is closed: audit with the judge that gave the records.")
        records = list(records)
        unknown = [r for r in records if r.key not in self._asked]
        if unknown:
            raise BatchError(f"Record {'/'.join(unknown[0].key)} (and {len(unknown) - 1} more) was not judged by this "
                             f"judge in its last {MAX_KEPT_REQUESTS} requests: audit records of the calls it made.")
        scratch = Path(tempfile.mkdtemp(prefix="audit-", dir=self._scratch_dir()))
        try:
            items = []
            for record in records:
                job = self._job(self._asked[record.key], scratch)
                items.append(AuditItem("/".join(record.key), job.problem, job.candidate, record.verdict,
                                       record.speedup, record.interval, past_build(record.phases)))
            return audit(items, options or self.options, on_record)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @staticmethod
    def _job(request: Request, scratch: Path) -> Job:
        candidate = request.candidate
        if isinstance(candidate, str):
            path = scratch / f"candidate_{_digest(candidate)[:16]}.py"
            if not path.exists():  # the same text is one file
                write_atomic(path, candidate)
            candidate = path
        return Job(request.problem, request.level, candidate, request.label)

    def _scratch_dir(self) -> Path:
        with self._lock:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="harness-judge-"))
            return self._scratch

    def _stream(self, jobs: list[Job], options: EvalOptions, folder: Path, scratch: Path) -> Iterator[SweepRecord]:
        with self._lock:
            if self._calling:
                raise BatchError("This judge is still evaluating another call's requests: finish iterating "
                                 "that call (or break out of it) first, or use a Judge of its own per thread.")
            self._calling = True
        try:
            log = ResultLog(folder, resume=True)
            try:
                wanted = {job.key for job in jobs}
                yield from [record for record in log.records if record.key in wanted]
                yield from self._run(pending(jobs, log), options, log)
            finally:
                log.close()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)  # every evaluation of the call has ended
            self._calling = False

    def _run(self, jobs: list[Job], options: EvalOptions, log: ResultLog) -> Iterator[SweepRecord]:
        if not jobs:
            return
        slots: list[Optional[int]] = list(self.gpus) if self.gpus and options.device != "cpu" else [options.gpu]
        chunks = self._chunks(jobs, options, len(slots))
        out: "queue.Queue" = queue.Queue()
        stop = threading.Event()
        appending = threading.Lock()

        def record(entry: SweepRecord) -> None:
            with appending:
                log.append(entry)
            out.put(entry)

        def work(slot: Optional[int]) -> None:
            try:
                while not stop.is_set() and (chunk := self._take(chunks, slot)) is not None:
                    self._evaluate(chunk, slot, record)
            except BaseException as exc:  # noqa: BLE001 - raised by the caller's thread
                out.put(exc)
            finally:
                out.put(_DONE)

        threads = [threading.Thread(target=work, args=(slot,), daemon=True, name=f"judge-{slot}") for slot in slots]
        for thread in threads:
            thread.start()
        errors, running = [], len(threads)
        try:
            while running:
                item = out.get()
                if item is _DONE:
                    running -= 1
                elif isinstance(item, BaseException):
                    errors.append(item)
                    stop.set()
                else:
                    yield item
        finally:  # also when the caller leaves the loop: nothing more starts, what runs ends
            stop.set()
            for build in (b for chunk in chunks for b in chunk.prebuilt or []):
                build.cancel()
            for thread in threads:
                join(thread)
        if errors:
            raise errors[0]

    def _chunks(self, jobs: list[Job], options: EvalOptions, slots: int) -> list[_Chunk]:
        """The call's requests by problem, each problem's builds handed in now; a problem with
        more than its share of the candidates split into shares, for several slots at once."""
        if self._builds is None:
            self._builds = Builds(self.build_jobs or default_build_jobs(options.device))
        share = -(-len(jobs) // slots)
        chunks = []
        for group in by_problem(jobs):
            try:
                problem: Optional[Problem] = load_problem(group[0].problem)
                key, error = (problem.path, problem.sha256, repr(options)), None
            except ProblemError as exc:
                problem, key, error = None, (str(group[0].problem.resolve()), "", repr(options)), exc
            builder = Builder(problem, options) if problem else None
            for start in range(0, len(group), share):
                part = group[start:start + share]
                prebuilt = [self._builds.submit(builder, job.candidate) for job in part] if builder else None
                chunks.append(_Chunk(key, problem, options, part, prebuilt, error))
        return chunks

    def _take(self, chunks: list[_Chunk], slot: Optional[int]) -> Optional[_Chunk]:
        """The slot's next chunk: of a problem it holds, else of one no slot holds, else any."""
        with self._lock:
            here = {key[:-1] for key in self._pools if key[-1] == slot}
            held = {key[:-1] for key in self._pools}
            for fits in (lambda c: c.key in here, lambda c: c.key not in held, lambda c: True):
                chunk = next((c for c in chunks if fits(c)), None)
                if chunk is not None:
                    chunks.remove(chunk)
                    chunk.started = time.monotonic()
                    return chunk
        return None

    def _evaluate(self, chunk: _Chunk, slot: Optional[int], record: Callable[[SweepRecord], None]) -> None:
        """The chunk through its problem's pool on this slot; a problem that could not be loaded
        has no pool, and evaluate_problem records why for each of its candidates."""
        key = (*chunk.key, slot)
        if chunk.error is None:
            chunk.pool = self._pool(chunk, key, slot)
        try:
            evaluate_problem("cpu" if slot is None else f"gpu {slot}", chunk, record, lambda where, doing: None)
        finally:
            if chunk.pool is not None:
                self._release(key)

    def _pool(self, chunk: _Chunk, key: tuple, slot: Optional[int]) -> Pool:
        """The pool kept for `key`, or a new one; busy until released."""
        with self._lock:
            pool = self._pools.pop(key, None)
            if pool is not None:
                self._pools[key] = pool  # now the most recently used
                self._busy.add(key)
                return pool
        assert chunk.problem is not None and self._builds is not None
        pool = Pool(chunk.problem, chunk.options, [slot] if slot is not None else None, builders=self._builds)
        with self._lock:
            if not self.closed:
                self._pools[key] = pool
                self._busy.add(key)
                self.opened += 1
                return pool
        pool.close()
        raise BatchError("The judge was closed while a call was being evaluated.")

    def _release(self, key: tuple) -> None:
        """The pool free again; the least recently used beyond max_pools closed."""
        with self._lock:
            self._busy.discard(key)
            idle = [k for k in self._pools if k not in self._busy]
            closing = [self._pools.pop(k) for k in idle[:max(0, len(self._pools) - self.max_pools)]]
        for pool in closing:
            pool.close()


_default: Optional[Judge] = None
_default_lock = threading.Lock()


def default_judge() -> Judge:
    """The judge behind evaluate_many: made on first use (again after a close), closed at exit."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Judge()
            atexit.register(_default.close)
        return _default


def evaluate_many(requests: Iterable[Union[Request, Sequence]], options: Optional[EvalOptions] = None,
                  log: Optional[Union[str, Path]] = None) -> Iterator[SweepRecord]:
    """Judge.evaluate on this process's default judge, which stays warm from one call to the next:
    each request's record as it finishes. `requests`: Requests or (problem, candidate[, label])
    tuples, a candidate a Path to a file or a str of source text; `options` default to
    EvalOptions(), on the CPU; `log`, a results folder to resume from and append to."""
    if isinstance(requests, (str, Path)):
        raise BatchError(f"evaluate_many takes (problem, candidate) requests, not the problem {requests} "
                         "alone: give [(problem, candidate), ...], or for one problem's candidates as a list "
                         "of results, harness.evaluate_batch(problem, candidates, options).")
    return default_judge().evaluate(requests, options, log)
