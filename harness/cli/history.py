"""The history commands' views: runs, show, compare and replay printed with rich."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..runs.history import (ROUND_FILES, HistoryError, Replay, RunEntry, list_runs, load, load_rounds, load_suite,
                             resolve, summarize)
from ..loop.proposers import kinds
from ..results import speedup_text
from ..runs.settings import Settings
from ..runs.records import Status
from ..runs.store import RunStore
from ..runs.suites import SuiteRecord, SuiteStore, is_suite
from ..stats import geomean
from .display import breaks_line, dollars, resume_line, standing


def _usd(value: Optional[float]) -> str:
    return "-" if value is None else f"${value:.3f}"


def _date(iso: str) -> str:
    try:
        return dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso or "-"


# Below this many columns the listing leaves out the proposer and why a run failed (`show` has both),
# so that the ids stay whole and the rest readable.
NARROW = 120


def runs_table(entries: list[RunEntry], width: int = NARROW) -> Table:
    table = Table(title="Runs, newest first")
    widest = max((len(e.id) for e in entries), default=2)
    narrow = width < NARROW
    columns = [c for c in ("id", "problem", "proposer", "rounds", "best", "status", "date")
               if not (narrow and c == "proposer")]
    for column in columns:
        # ids whole, to be copied; the other columns wrap to make room on a narrow terminal
        table.add_column(column, justify="right" if column in ("rounds", "best") else "left",
                         **({"no_wrap": True, "min_width": widest} if column == "id" else {}))
    for e in entries:
        if e.suite is not None:
            r = e.suite
            row = [e.id, f"{len(r.problems)} problems in {e.problem}", _proposer(r.settings),
                   str(sum(p.rounds for p in r.problems)), _geomean(r), f"suite {e.status}: "
                   f"{r.finished}/{len(r.problems)} problems done", _date(r.created)]
        elif e.run is None:
            row = [e.id, e.problem, "-", "-", "-", f"[red]{e.status.split(' (')[0]}[/red]", e.created]
        else:
            row = _run_row(e, narrow)
        table.add_row(*(row[:2] + row[3:] if narrow else row))
    return table


def _run_row(e: RunEntry, narrow: bool) -> list[str]:
    r = e.run
    status = f"[red]{e.status}[/red]" if e.status.startswith("damaged") else \
        r.status + (f": {r.outcome}" if r.outcome else "")
    if r.status == "failed" and r.message and not narrow:
        status += "\n" + escape(_first_sentence(r.message))
    return [e.id, e.problem, _proposer(r.settings), str(len(r.rounds)),
            speedup_text(r.best.speedup, r.best.interval) if r.best else speedup_text(None), status, _date(r.created)]


def _first_sentence(text: str, most: int = 160) -> str:
    """Why a run failed, short enough for a listing: its message's first sentence."""
    sentence = text.split(". ", 1)[0].rstrip(".") + "."
    return sentence if len(sentence) <= most else sentence[:most - 1] + "…"


def _proposer(settings: Settings) -> str:
    return settings.proposer + (f" ({settings.model})" if settings.model else "")


def _geomean(record: SuiteRecord) -> str:
    """The geometric mean of the problems' best speedups, over those with a correct candidate."""
    value = geomean([p.best for p in record.problems if p.best is not None])
    return "-" if value is None else f"{speedup_text(value)} geomean"


def print_suite(console: Console, store: SuiteStore, record: SuiteRecord) -> int:
    """A suite's problems: each one's standing, stop reason, rounds, best speedup and run."""
    console.print(f"[bold]{store.id}[/bold]  {len(record.problems)} problems in {record.directory}  proposer "
                  f"{_proposer(record.settings)}  {record.concurrency} at once", soft_wrap=True)
    console.print(f"status {record.status}; {record.finished}/{len(record.problems)} finished; accept "
                  f"{record.settings.accept}x, target {record.settings.target}x; {record.seconds:.0f} s")
    table = Table()
    for column in ("problem", "status", "rounds", "best"):
        table.add_column(column, justify="right" if column in ("rounds", "best") else "left", overflow="fold")
    # whole, for a run id is to be copied: the other columns give way
    table.add_column("run", min_width=max((len(p.run) for p in record.problems), default=3), no_wrap=True)
    for p in record.problems:
        table.add_row(p.name, standing(p), str(p.rounds),
                      speedup_text(p.best), p.run or "-")
    console.print(table)
    console.print(f"best speedups: {_geomean(record)} over {sum(p.best is not None for p in record.problems)} "
                  "problem(s) with a correct candidate")
    for p in record.problems:
        if p.standing == "failed":
            console.print(f"[red]{p.name}:[/red] {p.message}", highlight=False, soft_wrap=True)
    return 0


def print_runs(console: Console, runs_dir: Path, problem: Optional[str] = None) -> int:
    entries = list_runs(runs_dir, problem)
    if not entries:
        console.print(f"No runs under {runs_dir}" + (f" for problem {problem}." if problem else "."))
        return 0
    console.print(runs_table(entries, console.width))
    return 0


def print_show(console: Console, run: str, runs_dir: Path, round_n: Optional[int] = None,
               file: Optional[str] = None, best: bool = False) -> int:
    """Print a run's rounds, or one round's file (the best round's with `best`), or a suite's
    problems. Returns the exit status."""
    if is_suite(resolve(run, runs_dir)) and round_n is None and file is None and not best:
        return print_suite(console, *load_suite(run, runs_dir))
    store, record = load(run, runs_dir)
    if best:
        if round_n is not None:
            raise HistoryError("Give either --best or --round N: --best is the best round.")
        if record.best is None:
            raise HistoryError(f"Run {store.id} has no correct candidate, so no best round"
                               + (f": {record.message}" if record.message else "."))
        directory = (store.path / record.best.candidate).parent
        return _print_file(console, directory, file or "source", f"The best round ({record.best.round}) of {store.id}")
    if round_n is not None or file is not None:
        return _print_round_file(console, store, round_n, file or "source")
    rounds, damage = load_rounds(store)
    env = record.environment
    # without an evaluated round nothing was measured: the device the run was set to
    device = (env.device_name or env.device) if env else f"{record.settings.device} (nothing measured)"
    console.print(f"[bold]{store.id}[/bold]  problem {record.problem.name}  proposer {record.settings.proposer}"
                  f"  on {escape(device)}")
    console.print(f"status {record.status}" + (f", stopped by {record.stop_reason}" if record.stop_reason else "")
                  + (f", outcome {record.outcome}" if record.outcome else "")
                  + f"; accept {record.settings.accept}x, target {record.settings.target}x"
                  + (f", ceiling {record.ceiling:.2f}x" if record.ceiling else ""), markup=False)
    for note in record.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if record.message:  # the reason a run stopped, the endpoint's own words where it failed on them
        console.print(("why: " if record.status == "failed" else "") + record.message,
                      style="red" if record.status == "failed" else None, markup=False, highlight=False,
                      soft_wrap=True)
    if record.status in (Status.FAILED, Status.INTERRUPTED):  # stopped early: the loop said this at its exit
        console.print(resume_line(record, rounds, store.path), markup=False, highlight=False, soft_wrap=True)
    if not rounds:
        console.print("No round was evaluated" + (f": {damage}" if damage else "."), highlight=False)
        return 0
    asked = kinds.get(record.settings.proposer).asks_model  # tokens only where a model was asked
    noted = any(rnd.sample.approach for rnd in rounds)
    table = Table()
    columns = ["round", "verdict", "candidate ms", "reference ms", "speedup"] + ["tokens"] * asked + ["seconds"]
    red_team = record.settings.red_team  # what the audit said, and the rounds that broke the judge
    columns += ["audit", "break"] * red_team
    for column in columns + ["note"] * noted:
        table.add_column(column, justify="left" if column in ("verdict", "note", "audit", "break") else "right",
                         overflow="fold" if column == "note" else "ellipsis")
    for rnd in rounds:
        timings = rnd.eval.timings
        cells = [f"{timings[k].median:.3f}" if k in timings else "-" for k in ("candidate", "reference")]
        is_best = record.best is not None and record.best.round == rnd.n
        tokens = [str(rnd.tokens.total) + dollars(rnd.tokens, record.settings.prices)] * asked
        table.add_row(str(rnd.n) + (" *" if is_best else ""), rnd.eval.verdict.value, *cells,
                      speedup_text(rnd.eval.speedup), *tokens, f"{rnd.seconds:.1f}",
                      *[escape(rnd.audit_text), "[bold red]break[/bold red]" if rnd.broke else ""] * red_team,
                      *[escape(rnd.sample.approach)] * noted)
    console.print(table)
    if any(rnd.broke for rnd in rounds):
        console.print(breaks_line(_shown_path(store.path)), markup=False, highlight=False, soft_wrap=True)
    if record.best:
        best = record.best
        console.print(f"* best: round {best.round}, {speedup_text(best.speedup, best.interval)}, "
                      f"{_shown_path(store.path / best.candidate)} (harness show {store.id} --best --source)",
                      markup=False, highlight=False, soft_wrap=True)
    if damage:
        console.print(f"[yellow]The run directory is damaged: {damage}[/yellow]")
    return 0


def _shown_path(path: Path) -> str:
    """A path as one can use it from here: relative to the current directory where it is under it."""
    path = path.absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _print_round_file(console: Console, store: RunStore, round_n: Optional[int], file: str) -> int:
    if round_n is None:
        raise HistoryError(f"--{file} prints one round's file; give the round with --round N, or --best.")
    return _print_file(console, store.round_dir(round_n), file, f"Round {round_n} of {store.id}")


def _print_file(console: Console, directory: Path, file: str, which: str) -> int:
    path = directory / ROUND_FILES[file]
    if not path.is_file():
        raise HistoryError(f"{which} has no {ROUND_FILES[file]} ({path}): the round "
                           "does not exist, produced no such file, or the file was removed.")
    console.print(path.read_text(), markup=False, highlight=False, soft_wrap=True)
    return 0


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
            ("best speedup", speedup_text(a.best_speedup), speedup_text(b.best_speedup)),
            ("tokens", a.tokens, b.tokens),
            ("cost", _usd(a.cost_usd), _usd(b.cost_usd)),
            ("time", f"{a.seconds:.1f} s", f"{b.seconds:.1f} s")]
    for name, x, y in rows:
        table.add_row(name, str(x), str(y))
    console.print(table)
    return 0


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
            table.add_row("recorded (header)", "correct", "-", "-", speedup_text(result.recorded_speedup))
    for name, ev in rows:
        cells = [f"{ev.timings[k].median:.3f} ± {ev.timings[k].iqr:.3f}" if k in ev.timings else "-"
                 for k in ("candidate", "reference")]
        table.add_row(name, ev.verdict.value, *cells, speedup_text(ev.speedup, ev.speedup_interval))
    console.print(table)
    if result.now.speedup is None:
        console.print(f"[red]The replay is not correct: {result.now.explanation}[/red]")
        return 1
    if result.change is None:
        console.print("Nothing was recorded of this file to compare with (no promoted header).")
        return 0
    if result.intervals:
        verdict = ("within the noise: no measurable change (the two 95% intervals overlap)" if result.within_noise
                   else "outside the noise (the two 95% intervals do not overlap)")
        console.print(f"Speedup changed by {result.change:+.1%}, {verdict}.")
    else:
        verdict = "within" if result.within_noise else "outside"
        console.print(f"Speedup changed by {result.change:+.1%}, {verdict} the noise of the two measurements "
                      f"(±{result.noise:.1%}, from their timing IQRs; the record has no interval).")
    return 0
