"""A person at an editor: the candidate file is evaluated each time it is saved."""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Callable, Optional

from ...runs.settings import Settings
from ..prompts import candidate_template
from .base import Conversation, Kind, OutOfTime, Proposal, Proposer, Setup

HUMAN_FILE = "candidate.py"  # in the run directory: the file a person edits
POLL_SECONDS = 0.25
SETTLE_SECONDS = 0.3  # editors may write a file in several steps


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class HumanProposer:
    concurrent = False

    def __init__(self, path: Path, template: str, last: Optional[str] = None):
        """`last` is the candidate evaluated last on a resumed run."""
        self.path = Path(path)
        if not self.path.exists():
            self.path.write_text(template)
        # The untouched template, or the version evaluated last, is not a new candidate.
        self.seen = _digest(last if last is not None else self.path.read_text())

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        say(conversation.prompt)
        say(f"Edit and save {self.path} to evaluate it (Ctrl-C ends the run).")
        started = time.monotonic()
        while True:
            text = self._read()
            if text and text.strip() and _digest(text) != self.seen:
                time.sleep(SETTLE_SECONDS)
                if self._read() == text:
                    self.seen = _digest(text)
                    return Proposal(answer=text, origin=f"human:{self.path}", code=text,
                                    seconds=time.monotonic() - started)
                continue
            if time_left is not None and time.monotonic() - started >= time_left:
                raise OutOfTime(f"no save of {self.path} before the wall time ran out")
            time.sleep(POLL_SECONDS)

    def _read(self) -> Optional[str]:
        try:
            return self.path.read_text()
        except (OSError, UnicodeDecodeError):
            return None  # mid-save or moved aside by the editor: look again

    def close(self) -> None:
        pass


class HumanKind(Kind):
    def build(self, setup: Setup) -> Proposer:
        s = setup.settings
        template = candidate_template(setup.prompts, setup.problem, accept=s.accept, target=s.target,
                                      cpu=s.device == "cpu")
        return HumanProposer(setup.run_dir / HUMAN_FILE, template,
                             last=setup.rounds[-1].candidate if setup.rounds else None)

    def dry_run(self, settings: Settings) -> str:
        return "A run would show the user prompt above and wait for the candidate file's saves."


KIND = HumanKind("human", attended=True)
