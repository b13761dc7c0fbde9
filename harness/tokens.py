"""Token counts as a model's endpoint reports them: the loop spends them, runs/ records them, the
settings price them. Not an evaluation's result, so not in results.py; they round-trip to JSON alike.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Tokens:
    """Tokens an endpoint counted: what the loop spends and runs/ records."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0  # of the prompt, served from the provider's prefix cache
    reasoning: int = 0  # of the completion, spent reasoning

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: "Tokens") -> "Tokens":
        return Tokens(self.prompt + other.prompt, self.completion + other.completion,
                      self.cached + other.cached, self.reasoning + other.reasoning)
