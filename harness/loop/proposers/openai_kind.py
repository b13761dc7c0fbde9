"""The openai kind: an OpenAI-compatible endpoint asked for each candidate. Apart from openai.py,
which imports the client (a second's import), so that naming the kind does not load it."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

from ...runs.settings import Settings
from .base import Kind, Proposer, Setup

if TYPE_CHECKING:
    from .openai import OpenAIProposer

# What a dry run says where no model is configured, whichever proposer is named or none.
UNCONFIGURED = ("The prompts above are what a model would be sent first; no model is configured (--model, "
                "--base-url, or a --config file's [endpoint]).")


def client(settings: Settings) -> "OpenAIProposer":
    from .openai import OpenAIProposer  # the client is slow to import; only here

    return OpenAIProposer(model=settings.model or "", api_key=os.environ.get(settings.api_key_env),
                          base_url=settings.base_url, temperature=settings.temperature,
                          max_tokens=settings.max_tokens, window=settings.window,
                          timeout=settings.request_timeout, max_retries=settings.max_retries,
                          api_key_env=settings.api_key_env, token_param=settings.token_param,
                          reasoning_effort=settings.reasoning_effort, extra_body=settings.extra_body,
                          patience=settings.retry_for, stream=settings.stream)


class OpenAIKind(Kind):
    def build(self, setup: Setup) -> Proposer:
        return client(setup.settings)

    def dry_run(self, settings: Settings) -> str:
        if not settings.model:
            return UNCONFIGURED
        return (f"A run would send model `{settings.model}` at {settings.base_url or 'OpenAI'} the system "
                "prompt and the user prompt above as its first request.")

    def check(self, settings: Settings, dry_run: bool) -> list[str]:
        if settings.model or dry_run:
            return []
        return ["the openai proposer needs a model: give --model NAME or `model` in [endpoint] "
                "(--dry-run needs none)"]

    def implied(self, settings: Settings) -> Optional[str]:
        # a key alone names no model
        return "an endpoint is configured" if settings.base_url or settings.model else None

    def probe(self, settings: Settings) -> None:
        """The endpoint asked once: one that cannot serve the run is a ProposerError that leaves
        nothing behind."""
        proposer = client(settings)
        try:
            proposer.probe()
        finally:
            proposer.close()


KIND = OpenAIKind("openai", asks_model=True)
