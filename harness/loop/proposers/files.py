"""Candidates from files, one per call: `.py` files are candidates as they are,
`.txt`/`.md` files are recorded answers that go through extraction."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from .base import Conversation, Exhausted, Proposal, ProposerError

SUFFIXES = (".py", ".txt", ".md")


def expand(paths: list[str]) -> list[Path]:
    """Files in the order given; a directory stands for its candidate files in name order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES)
            if not inside:
                raise ProposerError(f"Directory {path} holds no .py, .txt or .md files to propose.")
            found.extend(inside)
        elif path.is_file():
            if path.suffix not in SUFFIXES:
                raise ProposerError(
                    f"File {path} is neither a candidate (.py) nor a recorded answer (.txt, .md).")
            found.append(path)
        else:
            raise ProposerError(f"File {path} given to --files does not exist.")
    return found


class FilesProposer:
    name = "files"
    concurrent = False  # files are taken in order

    def __init__(self, paths: list[str], start: int = 0):
        self.paths = expand(paths)
        self.next = start  # files already used, on a resumed run

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        # Reading a file takes no time worth limiting: `time_left` is not checked.
        if self.next >= len(self.paths):
            raise Exhausted(f"all {len(self.paths)} files were proposed")
        path = self.paths[self.next]
        self.next += 1
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ProposerError(f"File {path} cannot be read: {exc}.") from None
        return Proposal(answer=text, origin=f"file:{path}",
                        code=text if path.suffix == ".py" else None)

    def close(self) -> None:
        pass
