"""What every proposer shares: the conversation it is given and what it returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from ...errors import HarnessError
from ...tokens import Tokens


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
    name: str
    concurrent: bool  # may be asked for several samples at once, from threads

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        """One candidate for this round; `say` prints a line for the person watching.
        Raises OutOfTime where waiting would run past `time_left` seconds (None: no limit)."""
        ...

    def close(self) -> None:
        ...
