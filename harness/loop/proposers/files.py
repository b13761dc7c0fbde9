"""Candidates from files, one per call: `.py` files are candidates as they are,
`.txt`/`.md` files are recorded answers that go through extraction. Under --suite, each
problem's files are found in one directory as `harness sweep` finds them."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Optional

from ...runs.settings import Settings
from ...runs.suites import SuiteProblem
from ...sweep.jobs import SuiteError, candidates_of
from .base import Conversation, Exhausted, Kind, Proposal, Proposer, ProposerError, Setup

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


class FilesKind(Kind):
    def build(self, setup: Setup) -> Proposer:
        return FilesProposer(setup.settings.files, start=sum(len(r.samples) for r in setup.rounds))

    def dry_run(self, settings: Settings) -> str:
        return "A run would take its candidates from --files; the prompts above are what a model would be sent."

    def check(self, settings: Settings, dry_run: bool) -> list[str]:
        return [] if settings.files else ["the files proposer needs --files F1 F2 ... or a directory"]

    def implied(self, settings: Settings) -> Optional[str]:
        return "--files given" if settings.files else None

    def ready(self, settings: Settings) -> None:
        expand(settings.files)

    def check_suite(self, settings: Settings, problems: list[SuiteProblem]) -> None:
        """Candidate files for every problem in the one directory --files names, laid out as
        `harness sweep` finds candidates."""
        root = Path(settings.files[0]) if len(settings.files) == 1 else None
        if root is None or not root.is_dir():
            raise SuiteError("With --suite, --files takes one directory: <dir>/<problem name>.py, "
                             "<dir>/<problem name>/*.py or KernelBench's <dir>/<level>/<id>/sample_<k>.py.")
        bare = [p.name for p in problems if not candidates_of(Path(p.path), p.level, root)]
        if bare:
            raise SuiteError(f"Directory {root} holds no candidate files for {len(bare)} of the suite's "
                             f"problems ({', '.join(bare[:5])}{' ...' if len(bare) > 5 else ''}): expected "
                             "<dir>/<problem name>.py, <dir>/<problem name>/*.py or "
                             "<dir>/<level>/<id>/sample_<k>.py.")

    def for_problem(self, settings: Settings, problem: SuiteProblem) -> Settings:
        files = candidates_of(Path(problem.path), problem.level, Path(settings.files[0]))
        return dataclasses.replace(settings, files=[str(p) for p in files])


KIND = FilesKind("files")
