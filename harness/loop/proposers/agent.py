"""The agent kind: a run whose candidates a coding agent hands in through `harness mcp`
(agent/sessions.py writes its rounds with the loop's own functions). No `harness run` carries one on."""
from __future__ import annotations

from ...runs.settings import Settings
from .base import Kind


class AgentKind(Kind):
    def check(self, settings: Settings, dry_run: bool) -> list[str]:
        return [f"the run's candidates came from an agent through `harness mcp` (proposer {self.name}); give "
                "its id to that server's evaluate tool to carry it on there, or --proposer openai --model "
                "NAME to carry it on with a model"]


KIND = AgentKind("agent (mcp)", offered=False)


def is_agents(settings: Settings) -> bool:
    """Whether a run's candidates came from an agent: `harness mcp` carries on only such runs."""
    return settings.proposer == KIND.name
