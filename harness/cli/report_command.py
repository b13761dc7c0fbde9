"""`harness report`: a run, or a sweep's results, as one self-contained HTML page to open in a browser."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..errors import HarnessError
from ..files import write_atomic

DESCRIPTION = ("Write one HTML file that opens in any browser, offline: for a run, its settings and outcome, "
               "the speedup per round with its 95% interval against the accept, target and ceiling lines, "
               "each round's verdict, timings, build time, tokens and cost, its code with a diff against the "
               "candidate it came from, the prompt and the model's answer folded, and profile findings; for a "
               "sweep (--sweep DIR), fast_p against p, the summary per level, every evaluation, and the "
               "failures grouped by verdict. The path written is printed.")
REPORT_FILE = "report.html"


class ReportError(HarnessError):
    """A report that cannot be written; the message is one paragraph for a person."""


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="?", default=None,
                   help="a run directory, or a unique prefix of a run id under --runs-dir")
    p.add_argument("--sweep", type=Path, default=None, metavar="DIR",
                   help="instead of a run, a sweep's results folder (the one holding results.jsonl)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE.html",
                   help=f"where to write the page (default {REPORT_FILE} in the run's or the sweep's folder)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are kept (default runs)")


def report_main(args: argparse.Namespace, console: Console) -> int:
    if (args.run is None) == (args.sweep is None):
        raise ReportError("Give a run (its directory or id prefix) or --sweep DIR, one of the two.")
    if args.sweep is not None:
        text, folder = _sweep(args.sweep)
    else:
        text, folder = _run(args.run, args.runs_dir)
    out = args.output or folder / REPORT_FILE
    if out.is_dir():
        out = out / REPORT_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    console.print(str(out), markup=False, highlight=False, soft_wrap=True)
    return 0


def _run(run: str, runs_dir: Path) -> tuple[str, Path]:
    from ..runs.history import load, load_rounds, resolve
    from ..runs.html import run_page
    from ..runs.suites import is_suite

    if is_suite(resolve(run, runs_dir)):
        raise ReportError(f"{run} is a suite's directory; report one of its runs (`harness show {run}` lists "
                          "them).")
    store, record = load(run, runs_dir)
    rounds, damage = load_rounds(store)
    return run_page(record, rounds, damage), store.path


def _sweep(directory: Path) -> tuple[str, Path]:
    from ..sweep.html import sweep_page
    from ..sweep.records import RESULTS_FILE, read_records

    results = directory / RESULTS_FILE
    if not results.is_file():
        raise ReportError(f"{directory} holds no {RESULTS_FILE}: give the folder `harness sweep` wrote its "
                          "results into (its --out).")
    return sweep_page(str(directory), read_records(results)), directory
