"""What the loop tells whoever watches a run.

The loop reports through this protocol and never prints: the command line's
rich display (cli/display.py) implements it, and a test can implement it with
a list.
"""
from __future__ import annotations

from typing import Protocol

from ..runs.records import Round, Run
from ..runs.suites import SuiteProblem


class Observer(Protocol):
    def phase(self, n: int, sample: int, phase: str) -> None:
        """Round n's sample (0-based) entered a phase: asking, building, checking, timing."""

    def say(self, text: str) -> None:
        """A line for the person watching (proposers speak through it)."""

    def round_done(self, rnd: Round) -> None:
        """A round finished and was stored."""


class SuiteObserver(Protocol):
    """What a suite (loop/suite.py) tells whoever watches it: the loop's reports, per problem."""

    def started(self, problem: SuiteProblem, run: Run) -> None:
        """A problem's run started, or a stopped one resumed."""

    def phase(self, problem: SuiteProblem, n: int, sample: int, phase: str) -> None: ...

    def say(self, problem: SuiteProblem, text: str) -> None: ...

    def round_done(self, problem: SuiteProblem, run: Run, rnd: Round) -> None: ...

    def finished(self, problem: SuiteProblem) -> None:
        """A problem's run ended (its standing says how), or it could not start (its message says why)."""
