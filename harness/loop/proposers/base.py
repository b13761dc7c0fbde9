"""What every proposer shares: the conversation it is given, what it returns, and the kind that
names and builds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from ...errors import HarnessError
from ...tokens import Tokens

if TYPE_CHECKING:
    from ...problem import Problem
    from ...runs.settings import Settings
    from ...runs.store import Round
    from ...runs.suites import SuiteProblem
    from ..prompts import Prompts


class ProposerError(HarnessError):
    """A proposer that cannot go on (bad key, unknown model, unreachable endpoint);
    the message is one paragraph for a person."""


class Exhausted(Exception):
    """The proposer has nothing more to offer (a files list has run out)."""


class OutOfTime(Exception):
    """The run's wall time ran out while the proposer waited; the round is left unfinished."""


# Sent in place of an empty answer: endpoints that refuse empty assistant turns answer HTTP 400.
NO_ANSWER = "(no answer)"


@dataclass
class Turn:
    prompt: str
    answer: str
    n: int = 0  # the round it was, where known


@dataclass
class Conversation:
    system: str
    turns: list[Turn]  # completed rounds of the current chain, oldest first
    prompt: str  # this round's prompt: the problem in round 1, then the feedback
    first: str = ""  # the problem; by default the first turn's prompt, or this prompt in round 1
    # The best candidate's answer (as `answer`) and a note on its figures (as `prompt`),
    # sent whenever its round is outside the window, so the best never leaves the context.
    pinned: Optional[Turn] = None

    def messages(self, window: int = 0) -> list[dict[str, str]]:
        """Chat messages: system, the first prompt, the pinned best, then the last `window`
        exchanges (0: all), in this order so providers' prefix caches hit.

        The first prompt holds the problem, so it always stays; the feedback carries a
        table of every round, so dropped exchanges are not lost. Roles alternate:
        consecutive user messages (a pinned note before a fresh chain) are joined.
        """
        first = self.first or (self.turns[0].prompt if self.turns else self.prompt)
        turns = self.turns
        start = max(0, len(turns) - window) if window > 0 else 0
        shown = turns[start:]
        messages = [("system", self.system), ("user", first)]
        if self.pinned and all(t.n != self.pinned.n for t in shown):
            messages += [("assistant", self.pinned.answer), ("user", self.pinned.prompt)]
        if shown and start == 0 and shown[0].prompt != first:
            messages.append(("user", shown[0].prompt))  # a chain restarted from the best
        followups = [t.prompt for t in shown[1:]] + [self.prompt]
        for turn, followup in zip(shown, followups):
            messages += [("assistant", turn.answer), ("user", followup)]
        if not shown and self.prompt != first:
            messages.append(("user", self.prompt))
        joined: list[dict[str, str]] = []
        for role, content in messages:
            content = content if content.strip() else NO_ANSWER
            if joined and joined[-1]["role"] == role:
                joined[-1]["content"] += "\n\n" + content
            else:
                joined.append({"role": role, "content": content})
        return joined


@dataclass
class Proposal:
    answer: str  # the raw answer, reasoning included
    origin: str  # where it came from: "openai:MODEL", "file:PATH", "human:PATH"
    code: Optional[str] = None  # set when the answer is the candidate file itself
    tokens: Tokens = field(default_factory=Tokens)
    seconds: float = 0.0
    cut_off: bool = False  # the answer stopped at the token limit


class Proposer(Protocol):
    concurrent: bool  # may be asked for several samples at once, from threads

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        """One candidate for this round; `say` prints a line for the person watching.
        Raises OutOfTime where waiting would run past `time_left` seconds (None: no limit)."""
        ...

    def close(self) -> None:
        ...


@dataclass(frozen=True)
class Setup:
    """What a kind builds a run's proposer from."""

    settings: Settings
    run_dir: Path
    rounds: list[Round]  # a resumed run's finished rounds
    prompts: Prompts
    problem: Problem


@dataclass(frozen=True)
class Kind:
    """A proposer kind: the name `--proposer` and run.json give it, what sets it apart, and its hooks.
    Each kind's module holds one (a subclass where a hook differs from these defaults); kinds.py lists
    them all, and nothing else tells kinds apart by name."""

    name: str
    asks_model: bool = False  # an endpoint is asked and tokens counted: the model wait is shown
    # A person answers each round: one candidate a round, no round limit unless one is given, no suite
    # (a suite runs unattended).
    attended: bool = False
    offered: bool = True  # a --proposer choice; False: only another command makes such runs

    def build(self, setup: Setup) -> Proposer:
        raise NotImplementedError(f"the {self.name} proposer is not built by a run")

    def dry_run(self, settings: Settings) -> str:
        """What a run would do with the prompts a dry run prints."""
        raise NotImplementedError(f"the {self.name} proposer has no dry run")

    def check(self, settings: Settings, dry_run: bool) -> list[str]:
        """What in `settings` this kind cannot run with, each a clause of one paragraph."""
        return []

    def implied(self, settings: Settings) -> Optional[str]:
        """Why a run that names no proposer takes this one (say, "--files given"); None where it does not."""
        return None

    def probe(self, settings: Settings) -> None:
        """Before a run or suite makes anything: a ProposerError where its proposer cannot serve it."""

    def ready(self, settings: Settings) -> None:
        """Before one run's directory is made: a ProposerError where the run cannot start."""
        self.probe(settings)

    def check_suite(self, settings: Settings, problems: list[SuiteProblem]) -> None:
        """A SuiteError where this kind cannot serve every problem of a suite."""

    def for_problem(self, settings: Settings, problem: SuiteProblem) -> Settings:
        """A suite's settings as one of its problems' runs takes them."""
        return settings
