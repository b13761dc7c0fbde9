"""runs/ on disk: a directory per run (and per suite run, suites.py), each holding its record as
JSON, written by one process at a time. `Store` is what both kinds share; `RunStore` adds a run's
rounds and its heartbeat. The types a run's files hold are records.py's.

    runs/20261122T0315Z-layernorm_4d-a1b2c3/
      run.json              settings, problem hash, environment, status, best round
      rounds/001/prompt.md  answer.md  candidate.py  eval.json  build.log  round.json
      rounds/001/samples/2/answer.md ...   further samples of a round (--samples K)
      events.jsonl          append-only, one line per phase change
      candidate.py          the file a person edits (human proposer)

One process writes a run at a time: it holds an flock on run.lock for as long
as it lives, and refreshes `heartbeat` in run.json every HEARTBEAT_SECONDS. A
run recorded as running whose lock is free, or whose heartbeat is stale, lost
its process: it reads as interrupted, and --resume carries it on.

Every file is written to a temporary name and renamed into place, so a killed
run never leaves half a JSON file. A round's `round.json` is written last: a
round directory without it is the round that was in flight, and `--resume`
sets it aside under partial/ and runs that round again. Settings hold no API
key, so none reaches this directory.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from ..errors import HarnessError
from ..files import write_atomic
from ..results import EvalResult, from_dict, from_json, to_dict, to_json
from .records import Round, Run, Status

RUN_FILE = "run.json"
LOCK_FILE = "run.lock"
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 90.0  # several missed heartbeats: the process is gone or frozen
EVENTS_FILE = "events.jsonl"
ROUND_FILE = "round.json"
PROMPT_FILE = "prompt.md"
ANSWER_FILE = "answer.md"
CANDIDATE_FILE = "candidate.py"
EVAL_FILE = "eval.json"
BUILD_LOG = "build.log"
# Fields of a Round kept in their own files rather than in round.json.
_TEXT_FIELDS = ("answer", "candidate", "eval")


class StoreError(HarnessError):
    """A run directory that cannot be read; the message is one paragraph for a person."""


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(problem_name: str, now: Optional[dt.datetime] = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%dT%H%MZ}-{problem_name}-{secrets.token_hex(3)}"


def hold(path: Path, refusal: Callable[[str], str]) -> int:
    """An exclusive flock on `path` for as long as this process keeps the descriptor, with the
    pid written in it. Held elsewhere: a StoreError with `refusal(" (pid N)")`."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise StoreError(refusal(f" (pid {holder})" if holder else "")) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def held(path: Path) -> bool:
    """Whether a live process holds `path` (a lock file hold() took); False where there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


_S = TypeVar("_S", bound="Store")


class Store:
    """A directory under the runs dir holding one record (`record_file`, JSON, of `record_type`),
    written by the one process that holds `lock_file`. Reading it gives a record or a StoreError
    that says, in one paragraph, what is wrong with which file."""

    kind = ""  # what messages call it: run, suite
    record_file = ""
    record_type: Any = None
    lock_file = ""
    prefix = ""  # of the directory's name, before the id
    open_hint = ""  # said after "is not a ... directory"

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock_fd: Optional[int] = None

    @classmethod
    def create(cls: type[_S], runs_dir: str | Path, name: str) -> _S:
        """A new directory under runs_dir, named for the time and `name`."""
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = runs_dir / (cls.prefix + new_run_id(name))
            try:
                path.mkdir()
                return cls(path)
            except FileExistsError:
                continue

    @classmethod
    def open(cls: type[_S], path: str | Path) -> _S:
        store = cls(Path(path))
        if not (store.path / cls.record_file).is_file():
            raise StoreError(f"{path} is not a {cls.kind} directory: it has no {cls.record_file}.{cls.open_hint}")
        return store

    @property
    def id(self) -> str:
        return self.path.name

    def lock(self) -> None:
        """Take the directory for this process; one another process holds is a StoreError."""
        self._lock_fd = hold(self.path / self.lock_file, self._in_use)

    def _in_use(self, holder: str) -> str:
        """The refusal where another process holds the lock; `holder`: " (pid N)", or ""."""
        raise NotImplementedError

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def status(self, record: Any) -> Status:
        """A record written as running whose process is gone (its lock free) was interrupted."""
        if record.status is Status.RUNNING and not held(self.path / self.lock_file):
            return Status.INTERRUPTED
        return record.status

    def read(self) -> Any:
        """The record as it stands: its status says interrupted where its process is gone."""
        record = self._load()
        record.status = self.status(record)
        return record

    def _save(self, record: Any) -> None:
        write_atomic(self.path / self.record_file, to_json(record))

    def _load(self) -> Any:
        return self._load_json(self.path / self.record_file, self.record_type)

    def _unreadable(self, path: Path, exc: Exception) -> str:
        """What to say of a file of this directory that cannot be read (`exc` says why)."""
        raise NotImplementedError

    def _read(self, path: Path, missing_ok: bool = False) -> Optional[str]:
        try:
            return path.read_text()
        except FileNotFoundError as exc:
            if missing_ok:
                return None
            raise StoreError(self._unreadable(path, exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(self._unreadable(path, exc)) from None

    def _load_json(self, path: Path, cls: Any) -> Any:
        text = self._read(path)
        try:
            return from_json(cls, text) if cls else json.loads(text)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(self._unreadable(path, exc)) from None


class RunStore(Store):
    kind, record_file, record_type, lock_file = "run", RUN_FILE, Run, LOCK_FILE
    open_hint = " Give the directory that `harness run` printed, such as runs/<id>."

    def __init__(self, path: Path):
        super().__init__(path)
        self._writing = threading.Lock()  # run.json: the loop's saves and the heartbeat's
        self._stop_beating = threading.Event()  # one per lock(), set by release()

    @classmethod
    def create(cls, runs_dir: str | Path, problem_name: str) -> "RunStore":
        store = super().create(runs_dir, problem_name)
        (store.path / "rounds").mkdir()
        return store

    # --- the run ---------------------------------------------------------

    def save_run(self, run: Run) -> None:
        with self._writing:
            run.updated = run.heartbeat = utc_now()
            self._save(run)

    def load_run(self) -> Run:
        return self._load()

    def _unreadable(self, path: Path, exc: Exception) -> str:
        if isinstance(exc, FileNotFoundError):
            return f"Run file {path} is missing; the run directory is incomplete."
        if isinstance(exc, (OSError, UnicodeDecodeError)):
            return f"Run file {path} cannot be read: {exc}."
        return (f"Run file {path} is not valid: {exc}. It was probably edited or cut short; the rest of the run "
                "directory is intact.")

    # --- one writer, and whether it lives ----------------------------------

    def lock(self) -> None:
        """Take the run for this process, and keep its heartbeat going until release().
        A run another process holds is a StoreError: two writers would overwrite each other's rounds."""
        super().lock()
        self._stop_beating = threading.Event()
        threading.Thread(target=self._beat, args=(self._stop_beating,), name="run-heartbeat",
                         daemon=True).start()

    def _in_use(self, holder: str) -> str:
        return (f"Run {self.path} is in use by another harness process{holder}: it is still running, and two "
                "processes writing one run would overwrite each other's rounds. Wait for that run to end, or "
                "stop it (Ctrl-C), then --resume it.")

    def release(self) -> None:
        if self._lock_fd is not None:
            self._stop_beating.set()
            with self._writing:  # not while a heartbeat writes
                super().release()

    def _beat(self, stop: threading.Event) -> None:
        path = self.path / RUN_FILE
        while not stop.wait(HEARTBEAT_SECONDS):
            with self._writing:
                # Read back rather than serialise the Run the loop is changing in another thread.
                try:
                    record = json.loads(path.read_text())
                    record["heartbeat"] = utc_now()
                    write_atomic(path, json.dumps(record, indent=2))
                except (OSError, ValueError, TypeError):
                    pass  # run.json not written yet, or edited by hand: the next save_run beats

    def status(self, run: Run) -> Status:
        """The run's status as it stands: a run recorded as running whose process is gone
        (its lock free, or its heartbeat stale) was interrupted."""
        status = super().status(run)
        if status is not Status.RUNNING:
            return status  # its own, or interrupted: never locked (recorded before locks, or killed at its start)
        try:
            beat = dt.datetime.fromisoformat(run.heartbeat or run.updated)
        except ValueError:
            return Status.INTERRUPTED
        stale = (dt.datetime.now(dt.timezone.utc) - beat).total_seconds() > STALE_SECONDS
        return Status.INTERRUPTED if stale else Status.RUNNING

    def event(self, event: str, **fields: Any) -> None:
        line = json.dumps({"time": utc_now(), "event": event, **fields}) + "\n"
        # One write on an O_APPEND descriptor: lines from a killed run stay whole.
        fd = os.open(self.path / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    # --- rounds ----------------------------------------------------------

    def round_dir(self, n: int, sample: int = 0) -> Path:
        base = self.path / "rounds" / f"{n:03d}"
        return base if sample == 0 else base / "samples" / str(sample + 1)

    def write_prompt(self, n: int, prompt: str) -> None:
        self.round_dir(n).mkdir(parents=True, exist_ok=True)
        write_atomic(self.round_dir(n) / PROMPT_FILE, prompt)

    def write_answer(self, n: int, sample: int, answer: str) -> None:
        self.round_dir(n, sample).mkdir(parents=True, exist_ok=True)
        write_atomic(self.round_dir(n, sample) / ANSWER_FILE, answer)

    def write_candidate(self, n: int, sample: int, code: str) -> Path:
        path = self.round_dir(n, sample) / CANDIDATE_FILE
        write_atomic(path, code)
        return path

    def write_eval(self, n: int, sample: int, result: EvalResult) -> None:
        directory = self.round_dir(n, sample)
        log = Path(result.build.log_path) if result.build and result.build.log_path else None
        if log and log.is_file():
            write_atomic(directory / BUILD_LOG, log.read_bytes())
        write_atomic(directory / EVAL_FILE, to_json(result))

    def save_round(self, rnd: Round) -> None:
        """round.json, written last: from here on the round counts as done."""
        meta = to_dict(rnd)
        del meta["prompt"]
        for sample in meta["samples"]:
            for name in _TEXT_FIELDS:
                del sample[name]
        write_atomic(self.round_dir(rnd.n) / ROUND_FILE, json.dumps(meta, indent=2))

    def load_rounds(self) -> list[Round]:
        """The completed rounds, in order; reading stops at the first one not completed."""
        rounds = []
        n = 1
        while (self.round_dir(n) / ROUND_FILE).is_file():
            rounds.append(self.load_round(n))
            n += 1
        return rounds

    def partial_round(self, n: int) -> Optional[Path]:
        """Round n's directory if the run was stopped while n was in flight."""
        path = self.round_dir(n)
        return path if path.is_dir() and not (path / ROUND_FILE).exists() else None

    def drop_unanswered(self, n: int) -> None:
        """Round n's directory where it holds its prompt alone: asked, but the proposer had nothing to give."""
        path = self.round_dir(n)
        if path.is_dir() and [p.name for p in path.iterdir()] == [PROMPT_FILE]:
            (path / PROMPT_FILE).unlink()
            path.rmdir()

    def set_aside(self, n: int) -> Path:
        """Move the in-flight round n under partial/ so it can run again; its files stay."""
        target = self.path / "partial" / f"{n:03d}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
        target.parent.mkdir(exist_ok=True)
        os.replace(self.round_dir(n), target)
        return target

    def load_round(self, n: int) -> Round:
        directory = self.round_dir(n)
        meta = self._load_json(directory / ROUND_FILE, None)
        meta["prompt"] = self._read(directory / PROMPT_FILE)
        for index, sample in enumerate(meta.get("samples", [])):
            where = self.round_dir(n, index)
            sample["answer"] = self._read(where / ANSWER_FILE)
            sample["candidate"] = self._read(where / CANDIDATE_FILE, missing_ok=True)
            sample["eval"] = to_dict(self._load_json(where / EVAL_FILE, EvalResult))
        try:
            return from_dict(Round, meta)
        except (TypeError, KeyError, ValueError) as exc:
            raise StoreError(f"Run file {directory / ROUND_FILE} does not describe a round: {exc}.") from None
