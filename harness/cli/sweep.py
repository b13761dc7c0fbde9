"""`harness sweep`: a suite of problems and candidates, with a live view and a summary per level."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..files import write_atomic
from ..results import to_dict
from .config import add_eval_options, eval_options, parse_gpus

DESCRIPTION = ("Evaluate every (problem, candidate) pair of a suite on every GPU (--gpus narrows it), one "
               "JSON line per evaluation in results.jsonl of its own folder as it finishes (--resume DIR "
               "carries a killed sweep on), then a summary per level: correctness, fast_p for p = 0, 1, 1.5, 2 "
               "(against torch.compile too with --compile-baseline) and the geometric mean speedup, and a plot "
               "of fast_p against p.")
SWEEP_TIME_CAP = 2.0  # seconds of timing per candidate: a sweep wants many problems, not the last 0.1%
SUMMARY_FILE, PLOT_FILE = "summary.json", "fast_p.png"
RESULTS_DIR = Path("sweep-results")  # each sweep a folder of its own in it, by default


def _out(args: argparse.Namespace) -> Path:
    """Where the sweep's results go: --resume's folder, --out, or a new folder under RESULTS_DIR
    named by the time and what is swept, so that no sweep lands on another."""
    from ..sweep.jobs import SuiteError
    from ..sweep.records import RESULTS_FILE

    if args.resume:
        if not (args.resume / RESULTS_FILE).is_file():
            raise SuiteError(f"--resume {args.resume}: that folder holds no {RESULTS_FILE}, so there is no sweep to "
                             "carry on; give the folder an earlier sweep wrote its results to.")
        return args.resume
    if args.out:
        return args.out
    name = "runs" if args.runs else (args.adversarial or args.problems).name + ("-copies" if args.copies else "")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out, n = RESULTS_DIR / f"{stamp}-{name}", 1
    while out.exists():  # another sweep of the same problems started in the same second
        n += 1
        out = RESULTS_DIR / f"{stamp}-{name}-{n}"
    return out


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("problems", type=Path, nargs="?", default=None,
                   help="directory of problem files, or of level*/ directories of them")
    p.add_argument("candidates", type=Path, nargs="?", default=None,
                   help="directory of candidates: <level>/<problem id>/sample_<k>.py or "
                        "level_<n>_problem_<problem id>_sample_<k>_kernel.py (KernelBench's layouts), "
                        "<problem name>.py or <problem name>/*.py")
    p.add_argument("--copies", action="store_true",
                   help="instead of CANDIDATES, evaluate a copy of each problem's Model as ModelNew")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN",
                   help="instead of directories, the best candidate of each of these runs")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where --runs are kept (default runs)")
    p.add_argument("--adversarial", type=Path, default=None, metavar="DIR",
                   help="instead of directories, the corpus of attacks in DIR (e.g. tests/adversarial): each case on "
                        "the problem its header names, for this device, then caught and missed per invariant; exit 1 "
                        "where one is missed")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--out", type=Path, default=None, metavar="DIR",
                     help=f"where a new sweep's results go: results.jsonl, {SUMMARY_FILE}, {PLOT_FILE} (default "
                          f"{RESULTS_DIR}/<UTC time>-<problems>/)")
    out.add_argument("--resume", type=Path, default=None, metavar="DIR",
                     help="carry on the sweep whose results are in DIR, evaluating only what it lacks")
    p.add_argument("--csv", type=Path, default=None, metavar="FILE", help="also write every result as CSV")
    p.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                   help="run on the Ray cluster there (auto: the one this machine belongs to): a timing actor per "
                        "GPU of every node (per node with --device cpu); needs pip install 'harness[ray]'")
    add_eval_options(p)


def _source(args: argparse.Namespace, device: str):
    from ..sweep.jobs import SweepSource

    return SweepSource(args.problems, args.candidates, args.copies, args.runs, args.runs_dir, args.adversarial, device)


class _View:
    """The builds (done, running), the evaluations done / total, the rate, the time left,
    failures by verdict, and what each GPU is doing."""

    def __init__(self, total: int, done: int):
        self.total, self.done_before, self.done = total, done, done
        self.started = time.monotonic()
        self.failures: dict[str, int] = {}
        self.slots: dict[str, str] = {}
        self.builds = (0, 0, 0)  # handed in, running, done

    def count_builds(self, total: int, running: int, done: int) -> None:
        self.builds = (total, running, done)

    def record(self, record) -> None:
        self.done += 1
        if not record.correct:
            self.failures[record.verdict] = self.failures.get(record.verdict, 0) + 1

    def render(self) -> Group:
        elapsed = time.monotonic() - self.started
        new = self.done - self.done_before
        rate = new / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else None
        total, running, built = self.builds
        line = Text((f"builds {built}/{total} done, {running} running · " if total else "") +
                    f"evaluated {self.done}/{self.total}, {rate * 60:.1f}/min, "
                    f"{'ETA ' + _clock(left) if left is not None else 'ETA -'}, elapsed {_clock(elapsed)}")
        if self.failures:
            line.append("   failures: " + ", ".join(f"{v} {n}" for v, n in sorted(self.failures.items())), "red")
        table = Table(box=None, show_header=False)
        for slot, doing in sorted(self.slots.items()):
            table.add_row(slot, doing)
        return Group(line, table)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


WIDEST = 1000  # columns: the per-level table measured as wide as it would go


def summary_table(summaries, console: Console) -> Table:
    """A row a level where the console is wide enough, else a column a level (an 80-column terminal
    holds two levels' figures that way, where the rows' eleven columns were cut to "0.7…")."""
    from ..sweep.summary import summary_rows

    headers, rows = summary_rows(summaries)
    table = _table("Summary per level", headers, rows)
    if console.measure(table, options=console.options.update(max_width=WIDEST)).maximum <= console.width:
        return table
    return _table("Summary per level", *by_level(headers, rows))


def by_level(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The per-level table turned: a column a level, a row a figure, each figure named with the clock
    or baseline its group of columns names once ("gpu: fast_1", "fast_1.5" -> "gpu: fast_1.5")."""
    labels, group = [], ""
    for header in headers[1:]:
        if ": " in header:
            group = header.split(": ")[0] + ": "
        labels.append(header if ": " in header or not group else group + header)
    return ["", *(row[0] for row in rows)], [[label, *(row[n + 1] for row in rows)]
                                                     for n, label in enumerate(labels)]


def seconds_table(summaries) -> Table:
    from ..sweep.summary import seconds_rows

    return _table("Seconds a candidate (medians; waits for the device included)", *seconds_rows(summaries))


def _table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for n, column in enumerate(headers):
        table.add_column(column, justify="right" if n else "left")
    for row in rows:
        table.add_row(*row)
    return table


def _backward_as_recorded(options, records: list):
    """A resumed sweep goes on as it began: under --backward where its records are; a forward sweep is
    not resumed under --backward, since its records would mix the two."""
    from ..sweep.jobs import SuiteError
    from ..sweep.records import PROBLEM_ERROR

    evaluated = [r for r in records if r.verdict != PROBLEM_ERROR]
    if evaluated and all(r.backward for r in evaluated):
        return replace(options, backward=True)
    if options.backward and evaluated:
        raise SuiteError("The sweep being resumed checked forward passes only; --backward would mix its records "
                         "with forward and backward ones. Resume it without --backward, or give another --out.")
    return options


def sweep_main(args: argparse.Namespace, console: Console) -> int:
    from ..device import refuse_cuda_only, visible_gpus
    from ..sweep.sweep import Sweep, pending
    from ..sweep.jobs import SuiteError, by_options
    from ..sweep.plot import plot_fast_p
    from ..sweep.records import ResultLog, write_csv
    from ..sweep.summary import copy_check, copy_sentences, summarize

    args.time_cap = args.time_cap or SWEEP_TIME_CAP
    given = [flag for flag, value in (("--policy", args.policy), ("--backward", args.backward)) if value]
    if args.adversarial and given:
        raise SuiteError(f"--adversarial judges each case under the policy and backward pass its header names; drop "
                         f"{' and '.join(given)}.")
    if args.ray:
        if args.gpus:
            raise SuiteError("--gpus picks this machine's GPUs; with --ray every GPU of the cluster is used.")
        from ..sweep.ray_backend import cluster_device

        args.device = args.device or cluster_device(args.ray)  # the cluster's GPUs, not this machine's
    options = eval_options(args)
    gpus = parse_gpus(args.gpus) or (visible_gpus() if options.device != "cpu" and not args.ray else None)
    scratch = Path(tempfile.mkdtemp(prefix="harness-sweep-"))
    try:
        source = _source(args, options.device)
        jobs = source.jobs(scratch)
        # the device defaulted to cpu: say so before a doomed CUDA build (a corpus's cases name their devices)
        if args.device is None and not args.adversarial:
            for job in jobs:
                refuse_cuda_only(f"Candidate file {job.candidate}", job.candidate.read_text(errors="replace"))
        out = _out(args)
        log = ResultLog(out, bool(args.resume))
        source.write(out)
        try:
            options = options if args.adversarial else _backward_as_recorded(options, log.records)
            left = pending(jobs, log)
            view = _View(len(left) + len(log.records), len(log.records))
            live = Live(view.render(), console=console, transient=True, refresh_per_second=2)

            def on_record(record) -> None:
                view.record(record)
                live.update(view.render())

            def on_phase(slot: str, doing: str) -> None:
                view.slots[slot] = doing
                live.update(view.render())

            def on_builds(total: int, running: int, done: int) -> None:
                view.count_builds(total, running, done)
                live.update(view.render())

            def sweep_for(judged_under):
                if args.ray:
                    from ..sweep.ray_backend import RaySweep

                    return RaySweep(args.ray, judged_under, log, args.jobs, on_record, on_phase, on_builds)
                return Sweep(judged_under, gpus, log, args.jobs, on_record, on_phase, on_builds)

            # one sweep per set of options: a corpus's cases name their policy and backward pass
            parts = by_options(left, options) or [(options, [])]
            sweep = sweep_for(parts[0][0])
            console.print(f"{len(jobs)} evaluations of {len({(j.level, j.problem) for j in jobs})} problems; "
                          f"{len(log.records)} already in {log.path}, {len(left)} to go, on {sweep.where}.",
                          soft_wrap=True)
            with live:
                records = sweep.run(parts[0][1])
                for judged_under, part in parts[1:]:
                    records = sweep_for(judged_under).run(part)
        finally:
            log.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.adversarial:
        return corpus_end(records, out, log.path, console)
    summaries = summarize(records)
    write_atomic(out / SUMMARY_FILE, json.dumps([to_dict(s) for s in summaries], indent=2))
    plot = plot_fast_p(records, out / PLOT_FILE)
    if args.csv:
        write_csv(records, args.csv)
    console.print(summary_table(summaries, console))
    if any(s.seconds for s in summaries):
        console.print(seconds_table(summaries))
    elapsed, new = time.monotonic() - view.started, view.done - view.done_before
    console.print(f"This run: {new} evaluation(s) in {elapsed:.1f} s, {60 * new / elapsed:.1f} a minute.")
    for s in summaries:
        if s.skipped:
            console.print(f"{s.level}: {len(s.skipped)} problem(s) skipped under --backward, their outputs having no "
                          f"gradient: {', '.join(s.skipped)}.")
        if s.degenerate:
            console.print(Text(f"{s.level}: {len(s.degenerate)} evaluation(s) on degenerate problems, whose speedups "
                               "measure nothing, left out of the figures above:" +
                               "".join(f"\n  {apart.text}" for apart in s.degenerate), "yellow"), soft_wrap=True)
        if s.broken_problems:
            console.print(f"[red]{s.level}: {len(s.broken_problems)} problem(s) failed themselves, their candidates "
                          f"not run: {', '.join(s.broken_problems)} (see {log.path}).[/red]")
    copies = copy_check(records)
    if copies:  # the harness's own check: a copy read wrong fails the sweep
        for sentence, tone in copy_sentences(copies):
            console.print(Text(sentence, {"wrong": "red", "miss": "yellow", "again": "yellow", "fine": "green"}[tone]))
    console.print(f"Results in {log.path}, summary in {out / SUMMARY_FILE}, plot in {plot}"
                  + (f", CSV in {args.csv}" if args.csv else "") + ".")
    return 1 if copies and copies.wrong else 0


def corpus_end(records: list, out: Path, results: Path, console: Console) -> int:
    """A corpus sweep's end: caught and missed per invariant, in summary.json and as a table, each missed
    case with what it got; 1 where one was missed."""
    from ..sweep.corpus import tally, tally_rows

    tallies = tally((r.invariant, r.candidate, bool(r.caught)) for r in records if r.caught is not None)
    write_atomic(out / SUMMARY_FILE, json.dumps({"invariants": [to_dict(t) for t in tallies]}, indent=2))
    table = _table("Caught and missed per invariant", *tally_rows(tallies))
    table.columns[-1].justify = "left"  # names, not figures
    console.print(table)
    missed = [r for r in records if r.caught is False]
    for r in missed:
        console.print(Text(f"missed {r.candidate} ({r.invariant}): expected {r.expected}; got {r.verdict}: "
                           f"{r.explanation}", "red"), soft_wrap=True)
    if not missed:
        console.print(Text(f"Every case was caught ({len(records)}).", "green"))
    console.print(f"Results in {results}, summary in {out / SUMMARY_FILE}.")
    return 1 if missed else 0
