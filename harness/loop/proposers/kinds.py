"""Every proposer kind, by name: the command line's choices, a run's checks and its proposer are
looked up here, never told apart by comparing names. A new kind is a module holding its `KIND` and
a line below."""
from __future__ import annotations

from typing import Optional

from ...runs.settings import Settings
from . import agent, command, files, human, openai_kind
from .base import Kind, ProposerError

KINDS: tuple[Kind, ...] = (
    openai_kind.KIND,
    human.KIND,
    files.KIND,
    command.KIND,
    agent.KIND,
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def names() -> list[str]:
    """The kinds `--proposer` takes, in the order help and messages list them."""
    return [kind.name for kind in KINDS if kind.offered]


def find(name: str) -> Optional[Kind]:
    """The kind named `name`; None for a name no kind has (a dry run's "", a typo in a config file)."""
    return _BY_NAME.get(name)


def get(name: str) -> Kind:
    """The kind of a run whose settings were checked."""
    kind = find(name)
    if kind is None:
        raise ProposerError(f"No proposer is named `{name}`: --proposer takes {', '.join(names())}.")
    return kind


def implied(settings: Settings) -> Optional[Kind]:
    """The kind a new run takes where none is named. What the person gave (--files, a command) comes
    before an endpoint, which the environment may configure for every run."""
    ordered = sorted(KINDS, key=lambda kind: kind.asks_model)
    return next((kind for kind in ordered if kind.implied(settings)), None)


def unattended() -> str:
    """The kinds that can run a suite, as a sentence lists them: "the a, the b or the c"."""
    chosen = [f"the {kind.name}" for kind in KINDS if kind.offered and not kind.attended]
    return " or ".join([", ".join(chosen[:-1]), chosen[-1]] if len(chosen) > 1 else chosen)


def dry_run(settings: Settings) -> str:
    """What a run would do with the prompts a dry run prints; where no proposer is named, the prompts
    are what a model would be sent."""
    kind = find(settings.proposer)
    return kind.dry_run(settings) if kind else openai_kind.UNCONFIGURED
