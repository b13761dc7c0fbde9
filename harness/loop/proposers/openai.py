"""Any OpenAI-compatible chat-completions endpoint, through the official client.

The client retries rate limits (honouring Retry-After), timeouts, connection
errors and 5xx with exponential backoff; what is left after the retries becomes
a ProposerError that says what to do. The request runs in a daemon thread so that
the run's wall time ends the wait whatever the client is doing (a retry, a backoff).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import openai

from .base import Conversation, OutOfTime, Proposal, ProposerError, Tokens

DEFAULT_URL = "https://api.openai.com/v1"


class OpenAIProposer:
    name = "openai"

    def __init__(self, *, model: str, api_key: Optional[str], base_url: Optional[str],
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 window: int = 0, timeout: float = 600.0, max_retries: int = 2,
                 api_key_env: str = "OPENAI_API_KEY"):
        self.model = model
        self.timeout = timeout
        self.base_url = base_url or DEFAULT_URL
        self.api_key_env = api_key_env
        self.window = window
        self.options: dict[str, Any] = {}
        if temperature is not None:
            self.options["temperature"] = temperature
        if max_tokens is not None:
            self.options["max_tokens"] = max_tokens
        # Local servers (vLLM, Ollama, llama.cpp) accept any key; the client insists on one.
        self.client = openai.OpenAI(api_key=api_key or "none", base_url=self.base_url,
                                    timeout=timeout, max_retries=max_retries)

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        started = time.monotonic()
        # Each attempt is cut at the time left too, so an abandoned request ends by itself soon after.
        timeout = self.timeout if time_left is None else min(self.timeout, time_left)
        try:
            response = _within(time_left, lambda: self.client.chat.completions.create(
                model=self.model, messages=conversation.messages(self.window), timeout=timeout,
                **self.options))
        except openai.AuthenticationError as exc:
            raise ProposerError(
                f"The endpoint {self.base_url} rejected the API key (HTTP 401: {_message(exc)}). "
                f"Export a valid key in {self.api_key_env}, or point --base-url at the server "
                "the key belongs to.") from None
        except openai.PermissionDeniedError as exc:
            raise ProposerError(
                f"The endpoint {self.base_url} refused access to model `{self.model}` "
                f"(HTTP 403: {_message(exc)}).") from None
        except openai.NotFoundError as exc:
            raise ProposerError(
                f"The endpoint {self.base_url} has no model `{self.model}` (HTTP 404: "
                f"{_message(exc)}).{self._known_models()} Give one it serves with --model.") from None
        except openai.APIStatusError as exc:
            raise ProposerError(
                f"The endpoint {self.base_url} answered HTTP {exc.status_code} for model "
                f"`{self.model}` after retries: {_message(exc)}.") from None
        except openai.APITimeoutError:
            raise ProposerError(
                f"The endpoint {self.base_url} did not answer within the request timeout "
                f"({self.timeout:g} s) in {self.client.max_retries + 1} attempt(s); raise "
                "--request-timeout (or `request_timeout` in the config's [endpoint] table) if "
                "answers are long.") from None
        except openai.APIConnectionError as exc:
            raise ProposerError(
                f"Cannot reach the endpoint {self.base_url} after retries ({exc.__cause__ or exc}). "
                "Check --base-url and that the server is running.") from None
        if not response.choices:
            raise ProposerError(f"The endpoint {self.base_url} returned no choices for `{self.model}`.")
        choice = response.choices[0]
        usage = response.usage
        tokens = Tokens(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else Tokens()
        return Proposal(answer=_answer_text(choice.message), origin=f"openai:{self.model}",
                        tokens=tokens, seconds=time.monotonic() - started,
                        cut_off=choice.finish_reason == "length")

    def _known_models(self) -> str:
        try:
            names = sorted(m.id for m in self.client.models.list())
        except openai.OpenAIError:
            return ""
        return f" It serves: {', '.join(names[:20])}." if names else ""

    def close(self) -> None:
        self.client.close()


def _within(seconds: Optional[float], call: Callable[[], Any]) -> Any:
    """call() in a daemon thread; OutOfTime when it has not returned within `seconds` (None: no
    limit). The thread is left behind: it holds no lock of ours and ends with its own timeout."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="openai-request", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise OutOfTime(f"the endpoint had not answered when the wall time ran out ({seconds:.0f} s left)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return exc.message


def _answer_text(message: Any) -> str:
    """The answer with its reasoning in `<think>` tags where the server returns it apart
    (vLLM and SGLang's `reasoning_content`, Ollama's `reasoning`), so runs/ keeps it."""
    content = message.content or ""
    extra = getattr(message, "model_extra", None) or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        return f"<think>\n{reasoning.strip()}\n</think>\n\n{content}"
    return content
