"""What a person sees while a run goes: a live status line, and a table at the end.

On a terminal the status (round, phase, elapsed, best, and the time spent waiting
on the model) redraws in place; in a log (CI, a pipe) each phase change and each
round's result is one plain line.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..loop.feedback import headline
from ..loop.proposers import kinds
from ..results import Verdict, speedup_text
from ..runs.settings import cost_usd
from ..runs.records import Round, Run
from ..runs.suites import SuiteProblem, SuiteRecord
from ..tokens import Tokens


def print_error(errors: Console, error: Exception | str, prefix: bool = True) -> None:
    """The one way a command reports input it cannot use: `error: ...` on `errors` (stderr), plain and
    unwrapped, so a path or a command in the message stays whole to be copied."""
    errors.print(f"error: {error}" if prefix else str(error), markup=False, highlight=False, soft_wrap=True)


def clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class _Live:
    """Redrawn in place on a terminal while the `with` lasts (its __rich__); in a log, not drawn."""

    console: Console
    live: Optional[Live] = None

    def __enter__(self) -> "_Live":
        if self.console.is_terminal:
            self.live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()


class Display(_Live):
    """The loop's observer (loop/observer.py) on a console."""

    def __init__(self, console: Console, run: Run, elapsed: Callable[[], float]):
        self.console = console
        self.run = run
        self.elapsed = elapsed
        self.round = 0
        self.sample = 0
        self.phase_name = "starting"
        self.phase_since = time.monotonic()
        self.asked = 0.0  # seconds spent waiting on the model in this session, past phases
        self.breaks = 0  # rounds of this session that broke the judge (--red-team)

    def __rich__(self) -> Text:
        s = self.run.settings
        best = self.run.best
        sample = f" sample {self.sample + 1}/{s.samples}" if s.samples > 1 else ""
        return Text.assemble(
            ("round ", "dim"), (f"{self.round}/{s.rounds or '-'}", "bold"), sample,
            ("  phase ", "dim"), (self.phase_name, "bold cyan"),
            f" {clock(time.monotonic() - self.phase_since)}",
            ("  elapsed ", "dim"), clock(self.elapsed()),
            ("  best ", "dim"), (speedup_text(best.speedup, best.interval) if best else "-", "bold green"),
            ("  tokens ", "dim"), str(self.run.tokens.total), dollars(self.run.tokens, s.prices),
            *((("  model wait ", "dim"), clock(self.model_wait())) if self._model() else ()),
            *((("  breaks ", "dim"), (str(self.breaks), "bold red")) if s.red_team else ()))

    def _model(self) -> bool:
        return kinds.get(self.run.settings.proposer).asks_model

    def model_wait(self) -> float:
        """Seconds spent waiting on the model, the request in flight included."""
        asking = time.monotonic() - self.phase_since if self.phase_name == "asking" else 0.0
        return self.asked + asking

    def phase(self, n: int, sample: int, phase: str) -> None:
        self.asked = self.model_wait()
        self.round, self.sample, self.phase_name = n, sample, phase
        self.phase_since = time.monotonic()
        if not self.live:
            where = f"round {n}" + (f" sample {sample + 1}" if self.run.settings.samples > 1 else "")
            self.console.print(f"{where}: {phase} [{clock(self.elapsed())}]", markup=False,
                               highlight=False, soft_wrap=True)

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def round_done(self, rnd: Round) -> None:
        self.breaks += rnd.broke
        self.console.print(round_line(self.run, rnd), markup=False, highlight=False, soft_wrap=True)


def round_line(run: Run, rnd: Round) -> str:
    """A finished round in one line: its verdict, the best so far, its time and cost."""
    result, best = rnd.eval, run.best
    line = f"round {rnd.n}: {result.verdict.value} {headline(result)}".rstrip()
    asked = f", model {sum(s.ask_seconds for s in rnd.samples):.1f} s" \
        if kinds.get(run.settings.proposer).asks_model else ""
    asked += f", profile {rnd.profile_seconds:.1f} s" if rnd.profile_seconds else ""
    line += f"  (best {speedup_text(best.speedup, best.interval) if best else '-'}, {rnd.seconds:.1f} s{asked}" \
            f"{dollars(rnd.tokens, run.settings.prices)})"
    audits = [f"sample {i + 1} " * (len(rnd.samples) > 1) + ("BREAK, " * s.broke) + f"audit {s.audit.text}"
              for i, s in enumerate(rnd.samples) if s.audit]
    return line + "".join(f"; {audit}" for audit in audits)


def standing(problem: SuiteProblem) -> str:
    """Where a suite's problem stands, and the rule that stopped its run."""
    stop = problem.stop_reason
    return problem.standing + (f": {stop}" if stop not in ("", problem.standing) else "")


class SuiteDisplay(_Live):
    """A suite's observer (loop/observer.py SuiteObserver) on a console: a line per round and per
    problem started or ended, and on a terminal a live table under them: problems done and, per
    problem, its round, phase and best so far."""

    def __init__(self, console: Console, record: SuiteRecord, elapsed: Callable[[], float]):
        self.console, self.record, self.elapsed = console, record, elapsed
        self.where: dict[str, tuple[int, str]] = {}  # by problem path: its round and phase now

    def __rich__(self) -> Table:
        r = self.record
        table = Table(title=f"{r.finished}/{len(r.problems)} problems done  elapsed {clock(self.elapsed())}",
                      title_justify="left")
        for name in ("problem", "round", "phase", "best", "status"):
            table.add_column(name, justify="right" if name in ("round", "best") else "left")
        for p in r.problems:
            n, phase = self.where.get(p.path, (p.rounds, ""))
            table.add_row(p.name, f"{n}/{r.settings.rounds or '-'}", phase if p.standing == "running" else "",
                          speedup_text(p.best), standing(p))
        return table

    def started(self, problem: SuiteProblem, run: Run) -> None:
        self.say(problem, f"run {run.id}" + (f", resumed after round {len(run.rounds)}" if run.rounds else ""))

    def phase(self, problem: SuiteProblem, n: int, sample: int, phase: str) -> None:
        self.where[problem.path] = (n, phase)

    def say(self, problem: SuiteProblem, text: str) -> None:
        self.console.print(f"{problem.name}: {text}", markup=False, highlight=False, soft_wrap=True)

    def round_done(self, problem: SuiteProblem, run: Run, rnd: Round) -> None:
        self.say(problem, round_line(run, rnd))

    def finished(self, problem: SuiteProblem) -> None:
        self.say(problem, f"{problem.standing}. {problem.message}".strip())


def dollars(tokens: Tokens, prices: dict) -> str:
    """" $0.123" at the run's prices; nothing without a price table."""
    cost = cost_usd(tokens, prices)
    return "" if cost is None else f" ${cost:.3f}"


def rounds_table(rounds: list[Round], prices: dict, red_team: bool = False) -> Table:
    """The rounds, one row each; with `red_team`, what the audit said and whether the round broke the judge."""
    table = Table(title="Rounds", title_justify="left")
    profiled = any(rnd.profile_seconds for rnd in rounds)
    for name in ("round", "verdict", "speedup", "cand ms", "ref ms", "build s", "tokens",
                 "seconds", *(["profile s"] if profiled else []), *(["audit", "break"] if red_team else [])):
        table.add_column(name, justify="left" if name in ("verdict", "audit", "break") else "right")
    for rnd in rounds:
        r = rnd.eval
        cand, ref = r.timings.get("candidate"), r.timings.get("reference")
        style = "green" if r.verdict is Verdict.CORRECT else "red"
        table.add_row(str(rnd.n), Text(r.verdict.value, style=style),
                      speedup_text(r.speedup) if r.ok else "-",
                      f"{cand.median:.4g}" if cand else "-", f"{ref.median:.4g}" if ref else "-",
                      f"{r.build.seconds:.1f}" if r.build else "-",
                      str(rnd.tokens.total) + dollars(rnd.tokens, prices), f"{rnd.seconds:.1f}",
                      *([f"{rnd.profile_seconds:.1f}"] if profiled else []),
                      *([rnd.audit_text, Text("break", style="bold red") if rnd.broke else ""] if red_team else []))
    return table


def summary(console: Console, run: Run, rounds: list[Round], where: str, message: Optional[str] = None) -> None:
    """The rounds, the run's message (or `message`, "" for none) and where it is stored."""
    if rounds:
        console.print(rounds_table(rounds, run.settings.prices, run.settings.red_team))
    message = run.message if message is None else message
    if message:  # soft wrap: paths stay whole, to be copied from a terminal or a log
        console.print(Text(message, style="bold"), soft_wrap=True)
    if run.best:
        console.print(f"Best candidate: {where}/{run.best.candidate}", markup=False,
                      highlight=False, soft_wrap=True)
    if any(rnd.broke for rnd in rounds):
        console.print(breaks_line(where), markup=False, highlight=False, soft_wrap=True)
    console.print(f"Run stored in {where}", markup=False, highlight=False, soft_wrap=True)


def breaks_line(where: str | Path) -> str:
    """Where a run keeps its breaks, and the command that turns them into test cases."""
    return (f"Breaks kept in {where}/breaks; `harness breaks {where} --into tests/adversarial` writes them as "
            "test cases.")


def resume_line(run: Run, rounds: list[Round], path: Path) -> str:
    """What a stopped run keeps, and the command that carries it on."""
    kept = (f"the run keeps its {len(rounds)} finished round(s)"
            + (f" and its best, {run.best.speedup:.2f}x," if run.best else "") + " and ") if rounds else ""
    return f"Nothing is lost: {kept}`harness run --resume {path}` carries it on."
