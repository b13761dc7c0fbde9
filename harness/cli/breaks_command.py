"""`harness breaks RUN`: the breaks a red-team run kept (`harness run --red-team`), listed, or written out as test
cases with --into DIR."""
from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from rich.console import Console

from ..runs.breaks import BreaksError, line, read, write_cases
from ..runs.history import load

HELP = "a red-team run's breaks, or with --into DIR each written as a test case"
DESCRIPTION = ("List the breaks a `harness run --red-team` kept: the rounds whose candidate the fast verdict passed "
               "at the acceptable speedup or more and the audit did not, each with its folder under breaks/ in the "
               "run. With --into DIR, write each as a case file there: a header naming the invariant that caught it "
               "(# invariant:), its problem (# problem:), its device (# device:) and the verdict the judge must give "
               "with a fragment of its sentence (# expect:), then the candidate as it was.")


def add_breaks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run directory, or a unique prefix of a run id under --runs-dir")
    p.add_argument("--into", type=Path, default=None, metavar="DIR",
                   help="write each break as a case file into DIR, such as tests/adversarial")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs are kept (default runs)")


def breaks_main(args: argparse.Namespace, console: Console) -> int:
    store, record = load(args.run, args.runs_dir)
    found = read(store)
    say = partial(console.print, markup=False, highlight=False, soft_wrap=True)
    if not found:
        say(f"Run {store.id} kept no breaks: " + ("the judge held in every round." if record.settings.red_team
                                                  else "it did not run with --red-team, which audits its rounds."))
        return 0
    if args.into is None:
        for where, brk in found:
            say(f"{line(brk)}\n  {where}")
        return 0
    try:
        written = write_cases(store, args.into)
    except OSError as exc:
        raise BreaksError(f"The case files of run {store.id} cannot be written into {args.into}: "
                          f"{exc.strerror or exc}.") from None
    for case in written:
        say(f"Wrote {case}")
    return 0
