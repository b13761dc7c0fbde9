"""runs/: the record of every optimization run, and the types it holds.

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
import enum
import fcntl
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import HarnessError
from ..files import write_atomic
from ..results import Environment, EvalResult, Tokens, Verdict, from_dict, from_json, to_dict, to_json
from .settings import Evaluation, Settings

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


@dataclass
class Sample:
    """One answer of a round and what became of it."""

    answer: str
    origin: str
    extraction: str  # an extract.Extraction value, or "given" where the answer is the file
    candidate: Optional[str]
    eval: EvalResult
    tokens: Tokens = field(default_factory=Tokens)
    ask_seconds: float = 0.0
    eval_seconds: float = 0.0
    cut_off: bool = False
    approach: str = ""  # the approach in the answer's own words, cut short
    same_as: Optional[int] = None  # the round whose identical candidate's verdict this repeats
    direction: str = ""  # the direction this sample was asked to take (--samples K)
    parent: Optional["Parent"] = None  # the candidate it was asked to improve (--beam N)


@dataclass
class Parent:
    """A correct earlier candidate a sample starts from."""

    round: int
    sample: int  # 0-based
    speedup: float


@dataclass
class Round:
    n: int
    prompt: str
    samples: list[Sample]
    chosen: int = 0  # the sample the conversation carries on from
    started: str = ""
    seconds: float = 0.0
    fresh: bool = False  # its prompt restarted the conversation from the best candidate

    @property
    def sample(self) -> Sample:
        return self.samples[self.chosen]

    @property
    def answer(self) -> str:
        return self.sample.answer

    @property
    def candidate(self) -> Optional[str]:
        return self.sample.candidate

    @property
    def eval(self) -> EvalResult:
        return self.sample.eval

    @property
    def profile_seconds(self) -> float:
        """What profiling its samples cost (--profile)."""
        return sum(s.eval.profile.seconds for s in self.samples if s.eval and s.eval.profile)

    @property
    def tokens(self) -> Tokens:
        total = Tokens()
        for s in self.samples:
            total = total + s.tokens
        return total


@dataclass
class RoundSummary:
    n: int
    verdict: Verdict
    speedup: Optional[float]
    tokens: int
    seconds: float
    samples: int = 1
    profile_seconds: float = 0.0  # of `seconds`, spent profiling (--profile)


@dataclass
class ProblemRef:
    path: str
    name: str
    sha256: str


@dataclass
class Best:
    round: int
    sample: int  # 0-based index into the round's samples
    speedup: float
    candidate: str  # path relative to the run directory


class Status(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


class StopReason(enum.StrEnum):
    NONE = ""  # still running
    TARGET = "target"
    ROUNDS = "rounds"
    WALL_TIME = "wall_time"
    TOKENS = "tokens"
    FILES_EXHAUSTED = "files_exhausted"
    PLATEAU = "plateau"  # rounds without a measurable gain, after a restart from the best
    BUDGET = "budget"  # --budget-usd spent
    CEILING = "ceiling"  # the best is within reach of the physical ceiling: no target above it is reachable
    INTERRUPTED = "interrupted"
    PROPOSER = "proposer"  # the endpoint (or the files) failed past its retries; --resume carries the run on
    SESSION = "session"  # the agent's session through `harness mcp` ended (the agent (mcp) proposer's runs)
    ERROR = "error"


class Outcome(enum.StrEnum):
    NONE = ""  # not decided yet
    TARGET = "target"
    ACCEPTED = "accepted"
    BELOW_ACCEPT = "below_accept"
    NO_CORRECT = "no_correct"


@dataclass
class Run:
    id: str
    settings: Settings
    problem: ProblemRef
    created: str
    updated: str = ""
    status: Status = Status.RUNNING
    stop_reason: StopReason = StopReason.NONE
    outcome: Outcome = Outcome.NONE
    message: str = ""
    environment: Optional[Environment] = None
    seconds: float = 0.0  # time spent running, summed over resumes
    tokens: Tokens = field(default_factory=Tokens)
    best: Optional[Best] = None
    rounds: list[RoundSummary] = field(default_factory=list)
    evaluation: Optional[Evaluation] = None  # None in runs recorded before it was kept
    heartbeat: str = ""  # refreshed while a process runs it; "" in runs recorded before it was kept
    # the highest speedup the hardware allows: the reference's time over its floor plus host time
    ceiling: Optional[float] = None
    notes: list[str] = field(default_factory=list)  # said at the start, for whoever reads the run later


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


class RunStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._writing = threading.Lock()  # run.json: the loop's saves and the heartbeat's
        self._lock_fd: Optional[int] = None
        self._stop_beating = threading.Event()  # one per lock(), set by release()

    @classmethod
    def create(cls, runs_dir: str | Path, problem_name: str) -> "RunStore":
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = runs_dir / new_run_id(problem_name)
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        (path / "rounds").mkdir()
        return cls(path)

    @classmethod
    def open(cls, path: str | Path) -> "RunStore":
        store = cls(Path(path))
        if not (store.path / RUN_FILE).is_file():
            raise StoreError(f"{path} is not a run directory: it has no {RUN_FILE}. Give the "
                             "directory that `harness run` printed, such as runs/<id>.")
        return store

    @property
    def id(self) -> str:
        return self.path.name

    # --- the run ---------------------------------------------------------

    def save_run(self, run: Run) -> None:
        with self._writing:
            run.updated = run.heartbeat = utc_now()
            write_atomic(self.path / RUN_FILE, to_json(run))

    # --- one writer, and whether it lives ----------------------------------

    def lock(self) -> None:
        """Take the run for this process, and keep its heartbeat going until release().
        A run another process holds is a StoreError: two writers would overwrite each other's rounds."""
        self._lock_fd = hold(self.path / LOCK_FILE, lambda holder: (
            f"Run {self.path} is in use by another harness process{holder}: it is still running, and two "
            "processes writing one run would overwrite each other's rounds. Wait for that run to end, or "
            "stop it (Ctrl-C), then --resume it."))
        self._stop_beating = threading.Event()
        threading.Thread(target=self._beat, args=(self._stop_beating,), name="run-heartbeat",
                         daemon=True).start()

    def release(self) -> None:
        if self._lock_fd is not None:
            self._stop_beating.set()
            with self._writing:  # not while a heartbeat writes
                os.close(self._lock_fd)
                self._lock_fd = None

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
        if run.status is not Status.RUNNING:
            return run.status
        if not held(self.path / LOCK_FILE):
            return Status.INTERRUPTED  # never locked (recorded before locks, or killed at its start), or free
        try:
            beat = dt.datetime.fromisoformat(run.heartbeat or run.updated)
        except ValueError:
            return Status.INTERRUPTED
        stale = (dt.datetime.now(dt.timezone.utc) - beat).total_seconds() > STALE_SECONDS
        return Status.INTERRUPTED if stale else Status.RUNNING

    def load_run(self) -> Run:
        return self._load_json(self.path / RUN_FILE, Run)

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

    def _read(self, path: Path, missing_ok: bool = False) -> Optional[str]:
        try:
            return path.read_text()
        except FileNotFoundError:
            if missing_ok:
                return None
            raise StoreError(f"Run file {path} is missing; the run directory is incomplete.") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"Run file {path} cannot be read: {exc}.") from None

    def _load_json(self, path: Path, cls: Any) -> Any:
        text = self._read(path)
        try:
            return from_json(cls, text) if cls else json.loads(text)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"Run file {path} is not valid: {exc}. It was probably edited or "
                             "cut short; the rest of the run directory is intact.") from None
