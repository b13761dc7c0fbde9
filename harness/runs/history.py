"""Looking back at runs/: list, load, replay, compare and promote runs (the data;
cli/history.py prints it).

Every reader here tolerates a damaged run directory (a run killed mid-write, a
file removed by hand): such a run is listed with a status that says what is
wrong, and commands on it fail with one paragraph instead of a traceback.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from ..errors import HarnessError
from ..stats import overlap
from ..results import EvalResult, clears
from .records import Round, Run
from .settings import cost_usd
from .suites import SUITE_PREFIX, SuiteRecord, SuiteStore, is_suite
from .store import (ANSWER_FILE, BUILD_LOG, CANDIDATE_FILE, EVAL_FILE, PROMPT_FILE, ROUND_FILE, RUN_FILE, RunStore,
                    Store, StoreError)

if TYPE_CHECKING:
    from ..engine.options import EvalOptions

# The round files `show --round N` can print, by flag name.
ROUND_FILES = {"source": CANDIDATE_FILE, "prompt": PROMPT_FILE, "answer": ANSWER_FILE, "log": BUILD_LOG}


PROMOTED_MARK = "# harness: promoted"


class HistoryError(HarnessError):
    """A request about past runs that cannot be met; the message is one paragraph for a person."""


@dataclass
class RunEntry:
    """One directory under runs/: its record, or why it has none."""

    path: Path
    run: Optional[Run]
    problem: str
    created: str
    status: str  # the run's own status, "damaged: ..." when files are missing, "corrupt: ..." without run.json
    suite: Optional[SuiteRecord] = None  # set where the directory is a suite's (run is None then)

    @property
    def id(self) -> str:
        return self.path.name


def read_entry(path: Path) -> RunEntry:
    if is_suite(path):
        try:
            store, record = load_suite(path, path.parent)
        except HistoryError as exc:
            created = path.name.removeprefix(SUITE_PREFIX).split("-")[0]
            return RunEntry(path, None, "?", created, f"corrupt: suite.json unreadable ({exc})")
        return RunEntry(path, None, Path(record.directory).name, record.created, record.status, suite=record)
    try:
        store = RunStore.open(path)
        run = store.read()
    except StoreError as exc:
        missing = not (path / "run.json").is_file()
        status = "corrupt: no run.json" if missing else "corrupt: run.json unreadable"
        # The id holds the creation minute and the problem: <time>-<problem>-<hex>.
        parts = path.name.split("-")
        problem = "-".join(parts[1:-1]) if len(parts) >= 3 else "?"
        return RunEntry(path, None, problem, parts[0] if parts else "", f"{status} ({exc})")
    return RunEntry(path, run, run.problem.name, run.created, _damage(store, run) or run.status)


def _damage(store: RunStore, run: Run) -> Optional[str]:
    """What is missing of the files run.json says exist, checked by name only so listing stays fast."""
    for summary in run.rounds:
        for name in (ROUND_FILE, EVAL_FILE):
            if not (store.round_dir(summary.n) / name).is_file():
                return f"damaged: round {summary.n} has no {name}"
    if run.best and not (store.path / run.best.candidate).is_file():
        return f"damaged: best candidate {run.best.candidate} is missing"
    return None


def list_runs(runs_dir: Path, problem: Optional[str] = None) -> list[RunEntry]:
    """The run directories under runs_dir, newest first; hidden entries and plain files are skipped."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    entries = [read_entry(p) for p in runs_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if problem:
        entries = [e for e in entries if e.problem == problem]
    return sorted(entries, key=lambda e: (e.created, e.id), reverse=True)


LATEST = "latest"  # names the newest run (or suite) under runs_dir wherever a run is named


def resolve(run: str, runs_dir: Path, suite: bool = False) -> Path:
    """A run directory from a path, `latest` (the newest run under runs_dir; with `suite`, the newest
    suite), or a unique prefix of a run id under runs_dir."""
    path = Path(run)
    if path.is_dir():
        return path
    runs_dir = Path(runs_dir)
    if run == LATEST:
        return newest(runs_dir, suite)
    matches = sorted(p for p in runs_dir.iterdir() if p.is_dir() and p.name.startswith(run)) \
        if runs_dir.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise HistoryError(f"No run matches {run!r}: it is not a directory and no run id under "
                           f"{runs_dir} starts with it. `harness runs` lists the runs there.")
    names = ", ".join(p.name for p in matches[:5]) + (" ..." if len(matches) > 5 else "")
    raise HistoryError(f"{run!r} matches {len(matches)} runs under {runs_dir} ({names}); give more "
                       "of the id so it names one.")


def newest(runs_dir: Path, suite: bool = False) -> Path:
    """The run (or suite) under runs_dir whose record was written last."""
    found = [p for p in runs_dir.iterdir() if p.is_dir()] if runs_dir.is_dir() else []
    found = [p for p in found if (p.name.startswith(SUITE_PREFIX) if suite else (p / RUN_FILE).is_file())]
    if not found:
        raise HistoryError(f"No {'suite' if suite else 'run'} under {runs_dir} for `{LATEST}` to name. "
                           "Give --runs-dir where the runs are.")
    return max(found, key=lambda p: (p.name.removeprefix(SUITE_PREFIX).split("-")[0], p.stat().st_mtime))


def load(run: str, runs_dir: Path) -> tuple[RunStore, Run]:
    """A run's record from its directory, `latest` or a unique prefix of its id under runs_dir."""
    return _opened(RunStore, run, runs_dir)


def load_suite(suite: str | Path, runs_dir: Path) -> tuple[SuiteStore, SuiteRecord]:
    """A suite's record from its directory or a unique prefix of its id under runs_dir."""
    return _opened(SuiteStore, str(suite), runs_dir, suite=True)


_S = TypeVar("_S", bound=Store)


def _opened(kind: type[_S], name: str, runs_dir: Path, suite: bool = False) -> tuple[_S, Any]:
    """The store `name` resolves to, and its record as it stands; what is wrong with either, as a HistoryError."""
    path = resolve(name, runs_dir, suite)
    try:
        store = kind.open(path)
        return store, store.read()
    except StoreError as exc:
        raise HistoryError(str(exc)) from None


def load_rounds(store: RunStore) -> tuple[list[Round], Optional[str]]:
    """The rounds that can be read, and why reading stopped early, if it did.

    A round directory without round.json is the round in flight when the run
    stopped (or the prompt no answer came for): not done, and not damage.
    """
    rounds: list[Round] = []
    n = 1
    while (store.round_dir(n) / ROUND_FILE).is_file():
        try:
            rounds.append(store.load_round(n))
        except StoreError as exc:
            return rounds, f"round {n} cannot be read: {exc}"
        n += 1
    return rounds, None


@dataclass
class Promotion:
    target: Path
    speedup: float
    replaced: Optional[float]  # speedup of the kernel it overwrote, when there was one


def _promoted_header(path: Path) -> dict[str, str]:
    """The `# key: value` lines of a promoted kernel's header ({} when the file has none)."""
    lines = path.read_text().splitlines()[:8]
    if not lines or not lines[0].startswith(PROMOTED_MARK):
        return {}
    return {k.strip("# ").strip(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
            if k.startswith("# ") and v}


def _promoted_speedup(path: Path) -> Optional[float]:
    """The speedup written in a promoted kernel's header; None when the file has no such header."""
    try:
        return float(_promoted_header(path).get("speedup", "").split()[0].rstrip("x"))
    except (ValueError, IndexError):
        return None


def promote(run: str, runs_dir: Path, kernels_dir: Path, force: bool = False) -> Promotion:
    """Copy a run's best candidate to kernels_dir/<problem>.py with a header saying where it came from."""
    store, record = load(run, runs_dir)
    if record.best is None:
        raise HistoryError(f"Run {store.id} has no correct candidate to promote.")
    source = store.path / record.best.candidate
    if not source.is_file():
        raise HistoryError(f"The best candidate of {store.id}, {source}, is missing; the run directory "
                           "is incomplete, so there is nothing to promote.")
    target = Path(kernels_dir) / f"{record.problem.name}.py"
    replaced = None
    if target.exists():
        replaced = _promoted_speedup(target)
        if not force and (replaced is None or replaced >= record.best.speedup):
            held = f"a {replaced:.2f}x kernel" if replaced is not None else "a kernel of unknown speedup"
            raise HistoryError(f"{target} already holds {held}; this run's best is "
                               f"{record.best.speedup:.2f}x. Pass --force to overwrite it.")
    env = record.environment
    gpu = (env.device_name or env.device) if env else "unknown"
    header = (f"{PROMOTED_MARK} from run {store.id}\n# gpu: {gpu}\n"
              f"# speedup: {record.best.speedup:.3f}x (round {record.best.round})\n"
              f"# date: {dt.date.today().isoformat()}\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(header + source.read_text())
    return Promotion(target, record.best.speedup, replaced)


@dataclass
class Summary:
    """The figures `compare` sets side by side for one run."""

    id: str
    problem: str
    rounds: int
    rounds_to_target: Optional[int]  # None: the target was never reached
    best_speedup: Optional[float]
    tokens: int
    seconds: float
    cost_usd: Optional[float] = None  # None: the run had no price table


def summarize(store: RunStore, record: Run) -> Summary:
    target = record.settings.target
    reached = [r.n for r in record.rounds if r.speedup is not None and clears(r.speedup, r.interval, target)]
    return Summary(store.id, record.problem.name, len(record.rounds), reached[0] if reached else None,
                   record.best.speedup if record.best else None, record.tokens.total, record.seconds,
                   cost_usd(record.tokens, record.settings.prices))


@dataclass
class Replay:
    """A candidate measured again, beside what was recorded of it: a run's eval.json, or the
    speedup and GPU in a promoted kernel's header (nothing for a loose file)."""

    run: str  # the run id, or the candidate file's path
    recorded: Optional[EvalResult]
    recorded_speedup: Optional[float]
    now: EvalResult
    noise: float  # relative spread of the two speedups, from the timing IQRs
    recorded_device: str
    device: str

    @property
    def change(self) -> Optional[float]:
        """now / recorded speedup - 1; None when the replay is not correct or nothing was recorded."""
        if self.now.speedup is None or not self.recorded_speedup:
            return None
        return self.now.speedup / self.recorded_speedup - 1.0

    @property
    def intervals(self) -> Optional[tuple[list[float], list[float]]]:
        """The recorded and the new speedup's 95% intervals, where both have one."""
        before = self.recorded.speedup_interval if self.recorded else None
        return (before, self.now.speedup_interval) if before and self.now.speedup_interval else None

    @property
    def within_noise(self) -> bool:
        """No measurable change: the two intervals overlap; for records without one, the
        change is within the spread of the two timings."""
        if self.change is None:
            return False
        if self.intervals:
            return overlap(*self.intervals)
        return abs(self.change) <= self.noise

    @property
    def same_device(self) -> bool:
        return self.recorded_device in (self.device, "unknown")


def _spread(result: EvalResult) -> float:
    """A speedup's relative spread: the IQR-to-median ratios of its two timings, added."""
    return sum(t.iqr / t.median for key in ("candidate", "reference")
               if (t := result.timings.get(key)) and t.median > 0)


def _device_name(result: EvalResult) -> str:
    env = result.environment
    return (env.device_name or env.device) if env else "unknown"


def replay(run: str, runs_dir: Path, options: EvalOptions, problem: Optional[Path] = None) -> Replay:
    """Evaluate a run's best correct candidate (or a candidate file) again, fresh, and set it beside
    what was recorded of it."""
    # Imported here: the evaluator pulls in torch, which the other history commands never need.
    from ..engine.evaluate import evaluate

    if Path(run).suffix == ".py":
        return _replay_file(Path(run), options, problem)
    store, record = load(run, runs_dir)
    if record.best is None:
        raise HistoryError(f"Run {store.id} has no correct candidate to replay.")
    try:
        recorded = store.load_round(record.best.round).samples[record.best.sample].eval
    except (StoreError, IndexError) as exc:
        raise HistoryError(f"The best round of {store.id} cannot be read: {exc}") from None
    candidate = store.path / record.best.candidate
    if not candidate.is_file():
        raise HistoryError(f"The best candidate of {store.id}, {candidate}, is missing; nothing to replay.")
    problem = Path(problem or record.problem.path)
    if not problem.is_file():
        raise HistoryError(f"The run's problem file {problem} is not there; give it with --problem.")
    now = evaluate(problem, candidate, options)
    return Replay(store.id, recorded, recorded.speedup, now, _spread(recorded) + _spread(now),
                  _device_name(recorded), _device_name(now))


def _replay_file(candidate: Path, options: EvalOptions, problem: Optional[Path]) -> Replay:
    from ..engine.evaluate import evaluate

    if not candidate.is_file():
        raise HistoryError(f"{candidate} is not a file; replay takes a run id, a run directory or a "
                           "candidate .py file.")
    # kernels/<problem>.py sits beside problems/<problem>.py
    problem = Path(problem) if problem else candidate.resolve().parent.parent / "problems" / candidate.name
    if not problem.is_file():
        raise HistoryError(f"No problem file for {candidate}: {problem} is not there; give one with --problem.")
    header = _promoted_header(candidate)
    now = evaluate(problem, candidate, options)
    # Only the speedup was recorded, not its spread: take the same spread as now's.
    return Replay(str(candidate), None, _promoted_speedup(candidate), now, 2 * _spread(now),
                  header.get("gpu", "unknown"), _device_name(now))
