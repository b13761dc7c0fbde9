"""What every proposer shares: the conversation it is given and what it returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from ...errors import HarnessError
from ...results import Tokens


class ProposerError(HarnessError):
    """A proposer that cannot go on (bad key, unknown model, unreachable endpoint);
    the message is one paragraph for a person."""


class Exhausted(Exception):
    """The proposer has nothing more to offer (a files list has run out)."""


class OutOfTime(Exception):
    """The run's wall time ran out while the proposer waited; the round is left unfinished."""


@dataclass
class Turn:
    prompt: str
    answer: str


@dataclass
class Conversation:
    system: str
    turns: list[Turn]  # completed rounds, oldest first
    prompt: str  # this round's prompt: the problem in round 1, then the feedback

    def messages(self, window: int = 0) -> list[dict[str, str]]:
        """Chat messages: system, the first prompt, the last `window` exchanges (0: all).

        The first prompt holds the problem, so it always stays; the feedback
        carries a table of every round, so dropped exchanges are not lost.
        """
        turns = self.turns
        messages = [{"role": "system", "content": self.system}]
        if not turns:
            return messages + [{"role": "user", "content": self.prompt}]
        messages.append({"role": "user", "content": turns[0].prompt})
        followups = [t.prompt for t in turns[1:]] + [self.prompt]
        start = max(0, len(turns) - window) if window > 0 else 0
        for turn, followup in zip(turns[start:], followups[start:]):
            messages.append({"role": "assistant", "content": turn.answer})
            messages.append({"role": "user", "content": followup})
        return messages


@dataclass
class Proposal:
    answer: str  # the raw answer, reasoning included
    origin: str  # where it came from: "openai:MODEL", "file:PATH", "human:PATH"
    code: Optional[str] = None  # set when the answer is the candidate file itself
    tokens: Tokens = field(default_factory=Tokens)
    seconds: float = 0.0
    cut_off: bool = False  # the answer stopped at the token limit


class Proposer(Protocol):
    name: str

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        """One candidate for this round; `say` prints a line for the person watching.
        Raises OutOfTime where waiting would run past `time_left` seconds (None: no limit)."""
        ...

    def close(self) -> None:
        ...
