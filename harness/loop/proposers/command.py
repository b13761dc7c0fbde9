"""A program of your own answers each prompt: `--proposer command --command "python my_script.py"`
(config: `command` in [run]) runs it once per candidate, without a shell (its words split as a shell
splits them), the round's prompt on its stdin; its stdout is the answer, which goes through
extraction as a model's does. It may take --request-timeout seconds."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from typing import Callable, Optional

from ...runs.settings import Settings
from .base import Conversation, Kind, OutOfTime, Proposal, Proposer, ProposerError, Setup

STDERR_CHARS = 500  # of a failed command's stderr quoted in its error: the end, where the reason is


class CommandProposer:
    concurrent = False  # a program of someone's own may not expect to run twice at once

    def __init__(self, command: str, timeout: float):
        self.command, self.argv, self.timeout = command, shlex.split(command), timeout

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        cut = time_left is not None and time_left < self.timeout  # the wall time ends first
        started = time.monotonic()
        try:
            done = subprocess.run(self.argv, input=conversation.prompt, capture_output=True, text=True,
                                  errors="replace", timeout=time_left if cut else self.timeout)
        except subprocess.TimeoutExpired:
            if cut:
                raise OutOfTime(f"the command `{self.command}` was still running when the wall time ran out") \
                    from None
            raise ProposerError(f"The command `{self.command}` did not answer within {self.timeout:g} s; raise "
                                "--request-timeout (or `request_timeout` in the config's [endpoint] table) if it "
                                "needs longer.") from None
        except OSError as exc:
            raise ProposerError(f"The command `{self.command}` cannot be started: {exc.strerror or exc}.") from None
        if done.returncode:
            ended = f"exited with status {done.returncode}" if done.returncode > 0 else \
                f"was killed by signal {-done.returncode}"
            tail = " ".join(done.stderr[-STDERR_CHARS:].split())
            said = f" Its stderr ends: \"{tail}\"." if tail else " It wrote nothing to stderr."
            raise ProposerError(f"The command `{self.command}` {ended} instead of answering.{said}")
        return Proposal(answer=done.stdout, origin=f"command:{self.command}", seconds=time.monotonic() - started)

    def close(self) -> None:
        pass


class CommandKind(Kind):
    def build(self, setup: Setup) -> Proposer:
        return CommandProposer(setup.settings.command or "", setup.settings.request_timeout)

    def dry_run(self, settings: Settings) -> str:
        return (f"A run would run `{settings.command}` with the user prompt above on its stdin and take its "
                "stdout as the answer.")

    def check(self, settings: Settings, dry_run: bool) -> list[str]:
        try:
            given = bool(shlex.split(settings.command or ""))
        except ValueError as exc:  # an unclosed quote
            return [f"--command `{settings.command}` does not split into words: {exc}"]
        return [] if given else ["the command proposer needs a program to run: give --command \"PROGRAM ARGS\" "
                                 "or `command` in [run]"]

    def implied(self, settings: Settings) -> Optional[str]:
        return "a command is given" if settings.command else None

    def probe(self, settings: Settings) -> None:
        program = shlex.split(settings.command or "")[0]
        if shutil.which(program) is None:
            raise ProposerError(f"The command `{settings.command}` cannot be started: `{program}` is neither a "
                                "program on PATH nor an executable file.")


KIND = CommandKind("command")
