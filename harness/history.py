"""Looking back at runs/: list, show, replay, plot, compare and promote runs.

Every reader here tolerates a damaged run directory (a run killed mid-write, a
file removed by hand): such a run is listed with a status that says what is
wrong, and commands on it fail with one paragraph instead of a traceback.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rich.console import Console
from rich.table import Table

from .results import EvalResult, Verdict
from .store import (ANSWER_FILE, BUILD_LOG, CANDIDATE_FILE, EVAL_FILE, PROMPT_FILE, ROUND_FILE, Round, Run,
                    RunStore, StoreError)

if TYPE_CHECKING:
    from .evaluate import EvalOptions

# The round files `show --round N` can print, by flag name.
ROUND_FILES = {"source": CANDIDATE_FILE, "prompt": PROMPT_FILE, "answer": ANSWER_FILE, "log": BUILD_LOG}
PROMOTED_MARK = "# harness: promoted"


class HistoryError(Exception):
    """A request about past runs that cannot be met; the message is one paragraph for a person."""


@dataclass
class RunEntry:
    """One directory under runs/: its record, or why it has none."""

    path: Path
    run: Optional[Run]
    problem: str
    created: str
    status: str  # the run's own status, "damaged: ..." when files are missing, "corrupt: ..." without run.json

    @property
    def id(self) -> str:
        return self.path.name


def read_entry(path: Path) -> RunEntry:
    try:
        store = RunStore.open(path)
        run = store.load_run()
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


def resolve(run: str, runs_dir: Path) -> Path:
    """A run directory from a path or a unique prefix of a run id under runs_dir."""
    path = Path(run)
    if path.is_dir():
        return path
    runs_dir = Path(runs_dir)
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


def load(run: str, runs_dir: Path) -> tuple[RunStore, Run]:
    store = RunStore.open(resolve(run, runs_dir))
    try:
        return store, store.load_run()
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
            rounds.append(store._load_round(n))
        except StoreError as exc:
            return rounds, f"round {n} cannot be read: {exc}"
        n += 1
    return rounds, None


def _speedup(value: Optional[float]) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def _date(iso: str) -> str:
    try:
        return dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso or "-"


def runs_table(entries: list[RunEntry]) -> Table:
    table = Table(title="Runs, newest first")
    for column in ("id", "problem", "proposer", "rounds", "best", "status", "date"):
        table.add_column(column, justify="right" if column in ("rounds", "best") else "left")
    for e in entries:
        if e.run is None:
            table.add_row(e.id, e.problem, "-", "-", "-", f"[red]{e.status.split(' (')[0]}[/red]", e.created)
            continue
        r = e.run
        proposer = r.settings.proposer + (f" ({r.settings.model})" if r.settings.model else "")
        status = f"[red]{e.status}[/red]" if e.status.startswith("damaged") else \
            r.status + (f": {r.outcome}" if r.outcome else "")
        table.add_row(e.id, e.problem, proposer, str(len(r.rounds)),
                      _speedup(r.best.speedup if r.best else None), status, _date(r.created))
    return table


def print_runs(console: Console, runs_dir: Path, problem: Optional[str] = None) -> int:
    entries = list_runs(runs_dir, problem)
    if not entries:
        console.print(f"No runs under {runs_dir}" + (f" for problem {problem}." if problem else "."))
        return 0
    console.print(runs_table(entries))
    return 0


def print_show(console: Console, run: str, runs_dir: Path, round_n: Optional[int] = None,
               file: Optional[str] = None) -> int:
    """Print a run's rounds, or one round's file. Returns the exit status."""
    store, record = load(run, runs_dir)
    if round_n is not None or file is not None:
        return _print_round_file(console, store, round_n, file or "source")
    rounds, damage = load_rounds(store)
    env = record.environment
    console.print(f"[bold]{store.id}[/bold]  problem {record.problem.name}  proposer {record.settings.proposer}"
                  f"  on {env.device_name or env.device if env else 'unknown device'}")
    console.print(f"status {record.status}" + (f", stopped by {record.stop_reason}" if record.stop_reason else "")
                  + (f", outcome {record.outcome}" if record.outcome else "")
                  + f"; accept {record.settings.accept}x, target {record.settings.target}x")
    table = Table()
    for column in ("round", "verdict", "candidate ms", "reference ms", "speedup", "tokens", "seconds"):
        table.add_column(column, justify="left" if column == "verdict" else "right")
    for rnd in rounds:
        timings = rnd.eval.timings
        cells = [f"{timings[k].median:.3f}" if k in timings else "-" for k in ("candidate", "reference")]
        is_best = record.best is not None and record.best.round == rnd.n
        table.add_row(str(rnd.n) + (" *" if is_best else ""), rnd.eval.verdict.value, *cells,
                      _speedup(rnd.eval.speedup), str(rnd.tokens.total), f"{rnd.seconds:.1f}")
    console.print(table)
    if record.best:
        best = record.best
        console.print(f"* best: round {best.round}, {_speedup(best.speedup)}, {best.candidate}")
    if damage:
        console.print(f"[yellow]The run directory is damaged: {damage}[/yellow]")
    return 0


def _print_round_file(console: Console, store: RunStore, round_n: Optional[int], file: str) -> int:
    if round_n is None:
        raise HistoryError(f"--{file} prints one round's file; give the round with --round N.")
    path = store.round_dir(round_n) / ROUND_FILES[file]
    if not path.is_file():
        raise HistoryError(f"Round {round_n} of {store.id} has no {ROUND_FILES[file]} ({path}): the round "
                           "does not exist, produced no such file, or the file was removed.")
    console.print(path.read_text(), markup=False, highlight=False, soft_wrap=True)
    return 0


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


def summarize(store: RunStore, record: Run) -> Summary:
    reached = [r.n for r in record.rounds if r.speedup is not None and r.speedup >= record.settings.target]
    return Summary(store.id, record.problem.name, len(record.rounds), reached[0] if reached else None,
                   record.best.speedup if record.best else None, record.tokens.total, record.seconds)


def print_compare(console: Console, run_a: str, run_b: str, runs_dir: Path) -> int:
    a, b = (summarize(*load(run, runs_dir)) for run in (run_a, run_b))
    if a.problem != b.problem:
        console.print(f"[yellow]The runs are of different problems ({a.problem}, {b.problem}); "
                      "their speedups are not comparable.[/yellow]")
    table = Table()
    table.add_column("")
    table.add_column(a.id, justify="right")
    table.add_column(b.id, justify="right")
    rows = [("rounds", a.rounds, b.rounds),
            ("rounds to target", a.rounds_to_target or "not reached", b.rounds_to_target or "not reached"),
            ("best speedup", _speedup(a.best_speedup), _speedup(b.best_speedup)),
            ("tokens", a.tokens, b.tokens),
            ("time", f"{a.seconds:.1f} s", f"{b.seconds:.1f} s")]
    for name, x, y in rows:
        table.add_row(name, str(x), str(y))
    console.print(table)
    return 0


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
    def within_noise(self) -> bool:
        return self.change is not None and abs(self.change) <= self.noise

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
    from .evaluate import evaluate

    if Path(run).suffix == ".py":
        return _replay_file(Path(run), options, problem)
    store, record = load(run, runs_dir)
    if record.best is None:
        raise HistoryError(f"Run {store.id} has no correct candidate to replay.")
    try:
        recorded = store._load_round(record.best.round).samples[record.best.sample].eval
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
    from .evaluate import evaluate

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


def print_replay(console: Console, result: Replay) -> int:
    if not result.same_device:
        console.print(f"[yellow]It was recorded on {result.recorded_device}; this replay runs on "
                      f"{result.device}, so the figures need not agree.[/yellow]")
    table = Table(title=f"Replay of {result.run}")
    for column in ("", "verdict", "candidate ms", "reference ms", "speedup"):
        table.add_column(column, justify="left" if column in ("", "verdict") else "right")
    if result.recorded is not None:
        rows = [("recorded", result.recorded), ("now", result.now)]
    else:
        rows = [("now", result.now)]
        if result.recorded_speedup:
            table.add_row("recorded (header)", "correct", "-", "-", _speedup(result.recorded_speedup))
    for name, ev in rows:
        cells = [f"{ev.timings[k].median:.3f} ± {ev.timings[k].iqr:.3f}" if k in ev.timings else "-"
                 for k in ("candidate", "reference")]
        table.add_row(name, ev.verdict.value, *cells, _speedup(ev.speedup))
    console.print(table)
    if result.now.speedup is None:
        console.print(f"[red]The replay is not correct: {result.now.explanation}[/red]")
        return 1
    if result.change is None:
        console.print("Nothing was recorded of this file to compare with (no promoted header).")
        return 0
    verdict = "within" if result.within_noise else "outside"
    console.print(f"Speedup changed by {result.change:+.1%}, {verdict} the noise of the two measurements "
                  f"(±{result.noise:.1%}, from their timing IQRs).")
    return 0


@dataclass
class Plot:
    """What `plot` drew, for a caller to check without reading pixels."""

    path: Path
    problem: str
    runs: list[str]
    xlabel: str
    ylabel: str
    size: tuple[int, int]  # pixels, width by height
    log: bool  # a log speedup axis


def use_log_scale(speedups: list[float]) -> bool:
    """A log axis once the values span 10x or more (0.6x to 15x): a linear one squeezes the slow rounds flat."""
    positive = [v for v in speedups if v > 0]
    return bool(positive) and max(positive) / min(positive) >= LOG_SPAN


# Rounds without a speedup sit on a strip under the axis, marked by what went wrong.
_FAILED_MARKERS = {Verdict.INCORRECT: "v", Verdict.COMPILE_ERROR: "s", Verdict.NO_CODE: "_"}
_FAILED_TEXT = {Verdict.INCORRECT: "wrong", Verdict.COMPILE_ERROR: "no build", Verdict.NO_CODE: "no code"}
PLOT_SIZE = (10.0, 5.0)  # inches
PLOT_DPI = 100
LOG_SPAN = 10.0


def plot(runs: list[str], runs_dir: Path, out: Path) -> Plot:
    """Speedup per round of one or more runs of one problem, as a PNG labelled in place (no legend)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    loaded = [load(run, runs_dir) for run in runs]
    problems = {record.problem.name for _, record in loaded}
    if len(problems) > 1:
        raise HistoryError(f"The runs are of different problems ({', '.join(sorted(problems))}); one chart "
                           "holds runs of one problem, since speedups of different problems do not compare.")
    fig, ax = plt.subplots(figsize=PLOT_SIZE, dpi=PLOT_DPI)
    speedups = [r.speedup for _, record in loaded for r in record.rounds if r.speedup is not None]
    settings = loaded[0][1].settings
    marks = speedups + [settings.accept, settings.target, 1.0]
    log = use_log_scale(marks)
    if log:  # 0.6x and 20x both readable; failed rounds on a strip at the bottom
        ax.set_yscale("log")
        top, bottom = max(marks) * 1.8, min(marks) / 3
        strip = bottom * 1.5
        # speedups read as 0.5x, 1x, 2x, 5x, 10x rather than powers of ten
        ticks = [t * 10.0 ** e for e in range(-3, 5) for t in (1, 2, 5) if bottom <= t * 10.0 ** e <= top]
        ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
        ax.minorticks_off()
    else:
        top = max(speedups + [settings.target]) * 1.15
        strip = -top * 0.06
        bottom = strip * 2.5
    for (store, record), color in zip(loaded, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10):
        good = [(r.n, r.speedup) for r in record.rounds if r.speedup is not None]
        if good:
            ax.plot(*zip(*good), "-o", color=color)
            n, s = good[-1] if record.best is None else (record.best.round, record.best.speedup)
            ax.annotate(f"{store.id}\nbest {s:.2f}x", (n, s), textcoords="offset points", xytext=(0, 8),
                        ha="center", color=color, fontsize=8)
        for r in record.rounds:
            if r.speedup is None:
                ax.plot(r.n, strip, _FAILED_MARKERS.get(r.verdict, "x"), color=color, markersize=9)
                ax.annotate(_FAILED_TEXT.get(r.verdict, r.verdict.value.replace("_", " ")), (r.n, strip),
                            textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7, color=color)
    # The two lines are close together: their labels go to opposite ends so they never overlap.
    for value, name, style, side in ((settings.accept, "accept", ":", 1), (settings.target, "target", "--", 0)):
        ax.axhline(value, linestyle=style, color="gray")
        ax.annotate(f"{name} {value:g}x", (side, value), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(4 - 8 * side, 3), ha="right" if side else "left",
                    color="gray", fontsize=8)
    ax.axhline(1.0, color="lightgray", linewidth=0.8)
    ax.set_ylim(bottom, top)
    rounds = max((len(record.rounds) for _, record in loaded), default=1)
    ax.set_xticks(range(1, rounds + 1))
    ax.set_xlim(0.5, rounds + 0.5)
    ax.set_xlabel("round")
    ax.set_ylabel("speedup over the reference (log scale)\nfailed rounds at the bottom" if log else
                  "speedup over the reference (x)\nfailed rounds below 0")
    problem = problems.pop()
    ax.set_title(f"{problem}: speedup per round")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return Plot(out, problem, [store.id for store, _ in loaded], "round", ax.get_ylabel(),
                (int(PLOT_SIZE[0] * PLOT_DPI), int(PLOT_SIZE[1] * PLOT_DPI)), log)
