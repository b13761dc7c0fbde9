"""What an agent hands the judge, checked before anything runs: paths inside the allowed roots,
a candidate's source read or given, not oversized, parsing as Python."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from ..device import refuse_cuda_only
from ..errors import HarnessError
from ..integrity import static
from ..problem import Problem, load_problem

# A candidate is one Python file of kernels and their binding; past this it is a mistake or a flood,
# and it would reach the static check, the build and the run directory whole.
MAX_SOURCE_BYTES = 1 << 20


class AgentError(HarnessError):
    """Input a tool cannot act on; the message is one paragraph for the agent."""


class Roots:
    """The directories whose files the tools may read; relative paths are taken from the current one."""

    def __init__(self, directories: list[Path]):
        self.directories = [Path(d).resolve() for d in directories]

    def inside(self, path: str, what: str) -> Path:
        """`path` resolved (symbolic links followed, so none leads out), refused outside every root."""
        resolved = Path(path).expanduser().resolve()
        if not any(resolved.is_relative_to(root) for root in self.directories):
            allowed = ", ".join(str(root) for root in self.directories)
            raise AgentError(f"{what} {path} is outside the directories this server may read ({allowed}). Give a "
                             "path under one of them, or start the server with --root DIR for another.")
        return resolved

    def problem(self, path: str) -> Problem:
        return load_problem(self.inside(path, "Problem file"))


def candidate_source(roots: Roots, source: Optional[str], path: Optional[str]) -> tuple[str, Optional[Path]]:
    """The candidate's text, and its file where it was given as one."""
    if (source is None) == (path is None):
        raise AgentError("Give the candidate either as `source` (the file's text) or as `path` (a .py file), "
                         "not both and not neither.")
    file = None
    if path is not None:
        file = roots.inside(path, "Candidate file")
        if not file.is_file():
            raise AgentError(f"Candidate file {path} does not exist or is not a file.")
        if file.stat().st_size > MAX_SOURCE_BYTES:
            raise AgentError(_oversized(f"Candidate file {path}", file.stat().st_size))
        try:
            source = file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise AgentError(f"Candidate file {path} cannot be read: {exc}.") from None
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise AgentError(_oversized("The candidate's source", size))
    return source, file


def _oversized(what: str, size: int) -> str:
    return (f"{what} is {size:,} bytes, over the limit of {MAX_SOURCE_BYTES:,}: a candidate is one Python file "
            "defining ModelNew with its kernels. Send that file alone.")


def refuse_unbuildable(source: str, where: str, problem: Problem, device: str) -> None:
    """What could only fail to build, refused before a build starts: a file that does not parse, a CUDA
    candidate where there is no GPU."""
    unparsed = static.syntax_error(static.analyse(source, problem.source))
    if unparsed:
        raise AgentError(f"{where} was refused before any build: {unparsed}. Fix it and evaluate again.")
    if device == "cpu":
        refuse_cuda_only(where, source)


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()
