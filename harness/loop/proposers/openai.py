"""Any OpenAI-compatible chat-completions endpoint, through the official client.

The client retries rate limits (honouring Retry-After), timeouts, connection
errors and 5xx with exponential backoff. A 429 or 5xx left after those retries
is waited out (doubling waits, up to `patience` seconds in all: --retry-for)
rather than ending the run; other failures become a ProposerError that says what
to do. An answer that is not the API's (a proxy's HTML error page, whatever its
status; JSON without `choices`; a body or event the client cannot read, where it
raises no OpenAIError of its own) is a ProposerError quoting the body's first
line, never a traceback.
Endpoints differ, and each difference is met where it shows: `max_tokens`
refused (reasoning models want `max_completion_tokens`) is asked again with the
other name; a context-length error halves the window and asks again. The request
runs in a daemon thread so that the run's wall time ends the wait whatever the
client is doing (a retry, a backoff). With `stream`, the answer comes as
server-sent events and is assembled here, content and reasoning apart, with the
usage the last event carries.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import openai

from .base import Conversation, OutOfTime, Proposal, ProposerError, Tokens

DEFAULT_URL = "https://api.openai.com/v1"
PROBE_TIMEOUT = 30.0  # seconds for the model list asked before a run: a server that is up answers it at once
SAID_CHARS = 300  # of a server's own words quoted in a message: its first line, cut here
# What the client's response parsing raises, instead of an OpenAIError, on a body it did not expect: an
# HTML page as the model list, JSON of another shape, a stream event that is not JSON.
UNREADABLE = (AttributeError, TypeError, ValueError, LookupError)
ADVICE = ("A proxy's or gateway's error page (the server behind it down), or a server that speaks another API, "
          "answers like this: is --base-url the API's (an OpenAI-compatible server's ends in /v1)? Check it and "
          "the server's log.")


class OpenAIProposer:
    concurrent = True  # the client is thread-safe; a round's samples are asked at once

    def __init__(self, *, model: str, api_key: Optional[str], base_url: Optional[str],
                 temperature: Optional[float] = None, max_tokens: Optional[int] = None,
                 window: int = 0, timeout: float = 600.0, max_retries: int = 2,
                 api_key_env: str = "OPENAI_API_KEY", token_param: Optional[str] = None,
                 reasoning_effort: Optional[str] = None, extra_body: Optional[dict] = None,
                 patience: float = 300.0, first_wait: float = 30.0, stream: bool = False):
        self.model = model
        self.timeout = timeout
        self.base_url = base_url or DEFAULT_URL
        self.api_key_env = api_key_env
        self.window = window
        self.max_tokens = max_tokens
        self.token_param = token_param or "max_tokens"
        self.extra_body = extra_body or None
        self.patience, self.first_wait = patience, first_wait
        self.stream = stream
        self.options: dict[str, Any] = {}
        if temperature is not None:
            self.options["temperature"] = temperature
        if reasoning_effort is not None:
            self.options["reasoning_effort"] = reasoning_effort
        # Local servers (vLLM, Ollama, llama.cpp) accept any key; the client insists on one.
        self.client = openai.OpenAI(api_key=api_key or "none", base_url=self.base_url,
                                    timeout=timeout, max_retries=max_retries)

    def propose(self, conversation: Conversation, say: Callable[[str], None],
                time_left: Optional[float] = None) -> Proposal:
        started = time.monotonic()
        deadline = None if time_left is None else started + time_left
        answer = self._complete(conversation, say, deadline)
        if answer is None:  # a stream whose events held no choice
            raise self._malformed("", "a stream of events without `choices`")
        return Proposal(answer=_with_reasoning(answer.content, answer.reasoning), origin=f"openai:{self.model}",
                        tokens=_tokens(answer.usage), seconds=time.monotonic() - started,
                        cut_off=answer.finish_reason == "length")

    def _complete(self, conversation: Conversation, say: Callable[[str], None], deadline: Optional[float]
                  ) -> Optional["Answer"]:
        """One completion, asked again where the endpoint's answer says how to succeed; none
        past the run's wall time (`deadline`)."""
        waited, wait = 0.0, self.first_wait
        while True:
            options = dict(self.options)
            if self.max_tokens is not None:
                options[self.token_param] = self.max_tokens
            try:
                return self._create(conversation.messages(self.window), options, deadline)
            except openai.BadRequestError as exc:
                message = _message(exc)
                if self.token_param == "max_tokens" and "max_tokens" in options and \
                        "max_completion_tokens" in message:
                    self.token_param = "max_completion_tokens"
                    say(f"{self.model} refuses max_tokens; asking with max_completion_tokens.")
                    continue
                if _context_exceeded(exc) and self.window != 1 and len(conversation.turns) > 1:
                    shown = self.window or len(conversation.turns)
                    self.window = max(1, shown // 2)  # kept: later rounds only grow
                    say(f"The conversation exceeds {self.model}'s context; keeping the last "
                        f"{self.window} exchange(s).")
                    continue
                raise ProposerError(
                    f"The endpoint {self.base_url} refused the request for model `{self.model}` "
                    f"(HTTP 400: {message}).") from None
            except (openai.RateLimitError, openai.InternalServerError) as exc:
                wait = min(wait, self.patience - waited)  # the last wait ends at --retry-for
                if wait <= 0:
                    page = f" It is an HTML page, not the API's JSON. {ADVICE}" if _page(exc) else ""
                    raise ProposerError(
                        f"The endpoint {self.base_url} answered HTTP {exc.status_code} for model "
                        f"`{self.model}` after retries and {waited:.0f} s of waiting (--retry-for "
                        f"{self.patience:g} s): \"{_said(exc)}\".{page}") from None
                if deadline is not None and time.monotonic() + wait >= deadline:
                    raise OutOfTime("the endpoint was still refusing when the wall time ran out") from None
                say(f"The endpoint answered HTTP {exc.status_code} after retries: \"{_said(exc)}\". Waiting "
                    f"{wait:.0f} s before asking again ({waited + wait:.0f} of at most {self.patience:g} s, "
                    "--retry-for); Ctrl-C is safe, and --resume carries the run on from its last round.")
                time.sleep(wait)
                waited, wait = waited + wait, 2 * wait

    def _create(self, messages: list[dict[str, str]], options: dict[str, Any], deadline: Optional[float]
                ) -> Optional["Answer"]:
        time_left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        # Each attempt is cut at the time left too, so an abandoned request ends by itself soon after.
        timeout = self.timeout if time_left is None else min(self.timeout, time_left)
        if self.stream:  # the last event carries the usage, where the server is asked for it
            options = {**options, "stream": True, "stream_options": {"include_usage": True}}

        def create() -> Optional[Answer]:
            ask = dict(model=self.model, messages=messages, timeout=timeout, extra_body=self.extra_body, **options)
            if self.stream:
                return self._streamed(self.client.chat.completions.create(**ask))
            # raw, so that a body that is not a chat completion can be quoted
            raw = self.client.chat.completions.with_raw_response.create(**ask)
            body = raw.http_response.text
            try:
                response = raw.parse()
                if isinstance(response, str):  # the client hands back a body that is not JSON as text
                    raise self._malformed(body, f"{_kind(raw.http_response)}, not the API's JSON")
                if response.choices:
                    return _answer(response)
            except json.JSONDecodeError:  # JSON by its content type that does not parse
                raise self._malformed(body, "JSON that does not parse, not a chat completion") from None
            except UNREADABLE as exc:
                raise self._malformed(body, f"JSON the client cannot read ({_named(exc)}), "
                                            "not a chat completion") from None
            raise self._malformed(body, "JSON without `choices`, not a chat completion")

        try:
            # a stream is read in the same thread, so the wall time cuts it too
            return _within(time_left, create)
        except (openai.RateLimitError, openai.InternalServerError):
            raise  # waited out by the caller: behind a proxy's error page too, the server may be restarting
        except openai.BadRequestError as exc:
            if not _page(exc):
                raise  # handled by the caller, which knows what to change
            raise self._explained(exc) from None
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            raise self._explained(exc) from None

    def _streamed(self, stream: Any) -> Optional["Answer"]:
        """A streamed answer assembled; a body that is not server-sent events, or an event the
        client cannot read, is a ProposerError quoting what came."""
        response = stream.response
        # an untyped body is left to the decoder: only a type that says otherwise is refused unread
        if response.headers.get("content-type", "").split(";")[0].strip() not in ("", "text/event-stream"):
            response.read()
            stream.close()
            raise self._malformed(response.text, f"{_kind(response)}, not the API's server-sent events")
        try:
            return _assembled(stream)
        except UNREADABLE as exc:
            raise self._malformed("", f"an event the client cannot read ({_named(exc)}), "
                                      "not a chat completion chunk") from None

    def _malformed(self, body: str, reason: str) -> ProposerError:
        """An answer that is not the API's, with the first line of what came instead."""
        line = _first_line(body)
        quoted = f" Its body begins: \"{line}\"." if line else ""
        return ProposerError(
            f"The endpoint {self.base_url} answered the request for model `{self.model}` with {reason}."
            f"{quoted} {ADVICE}")

    def _explained(self, exc: openai.APIStatusError | openai.APIConnectionError) -> ProposerError:
        """What a failed request means for the run, and what to do about it."""
        if isinstance(exc, openai.APIStatusError) and _page(exc):  # not the API's words, whatever the status
            return self._malformed(exc.body, f"{_kind(exc.response)}, not the API's JSON")
        if isinstance(exc, openai.AuthenticationError):
            return ProposerError(
                f"The endpoint {self.base_url} rejected the API key (HTTP 401: {_message(exc)}). "
                f"Export a valid key in {self.api_key_env}, or point --base-url at the server "
                "the key belongs to.")
        if isinstance(exc, openai.PermissionDeniedError):
            return ProposerError(
                f"The endpoint {self.base_url} refused access to model `{self.model}` "
                f"(HTTP 403: {_message(exc)}).")
        if isinstance(exc, openai.NotFoundError):
            return ProposerError(
                f"The endpoint {self.base_url} has no model `{self.model}` (HTTP 404: "
                f"{_message(exc)}).{self._known_models()} Give one it serves with --model.")
        if isinstance(exc, openai.APIStatusError):
            return ProposerError(
                f"The endpoint {self.base_url} answered HTTP {exc.status_code} for model "
                f"`{self.model}` after retries: \"{_said(exc)}\".")
        if isinstance(exc, openai.APITimeoutError):
            return ProposerError(
                f"The endpoint {self.base_url} did not answer within the request timeout "
                f"({self.timeout:g} s) in {self.client.max_retries + 1} attempt(s); raise "
                "--request-timeout (or `request_timeout` in the config's [endpoint] table) if "
                "answers are long.")
        return ProposerError(
            f"Cannot reach the endpoint {self.base_url} after retries ({exc.__cause__ or exc}). "
            "Check --base-url and that the server is running.")

    def probe(self) -> None:
        """One cheap request before a run makes anything: a ProposerError that says why where the
        endpoint cannot be reached, refuses the key, does not serve the model or answers with what is not
        the API's (an HTML page). The model list answers where the server gives one and names the model;
        otherwise a one-token completion, read as a run's are, decides (Ollama answers to `llama3` though
        it lists `llama3:latest`; some servers list nothing)."""
        try:
            served = {m.id for m in self.client.models.list(timeout=min(self.timeout, PROBE_TIMEOUT))}
        except (openai.AuthenticationError, openai.APIConnectionError) as exc:
            raise self._explained(exc) from None
        except (openai.APIStatusError, *UNREADABLE):
            served = set()  # no model list here, or none the client reads: the completion says
        if self.model in served:
            return
        try:
            self._create([{"role": "user", "content": "Say OK."}], {self.token_param: 1}, None)
        except (openai.BadRequestError, openai.RateLimitError, openai.InternalServerError) as exc:
            if _page(exc):  # a proxy's error page: nothing behind it answers now
                raise self._explained(exc) from None
            # the model is there: what it refuses of this request, or a busy moment, the run meets

    def _known_models(self) -> str:
        try:
            names = sorted(m.id for m in self.client.models.list())
        except (openai.OpenAIError, *UNREADABLE):
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
    if isinstance(body, str) and body.strip():  # a body that is not JSON (a proxy's page): its first words
        return _first_line(body)
    return exc.message


def _first_line(text: str) -> str:
    """The first line with words in it, HTML tags left out (an error page's title, as a rule), cut to
    SAID_CHARS."""
    text = re.sub(r"<[^>]*>", "\n", text)
    line = next((" ".join(line.split()) for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= SAID_CHARS else line[:SAID_CHARS] + "..."


def _said(exc: openai.APIStatusError) -> str:
    """The server's own words for a failed request: its error message, else its body's first line."""
    return _first_line(_message(exc)) or f"HTTP {exc.status_code}, no text"


def _html(content_type: str, text: str) -> bool:
    """Whether a body is an HTML page (a proxy's, a web server's), by its content type or its first character."""
    return "html" in content_type or text.lstrip().startswith("<")


def _page(exc: openai.APIStatusError) -> bool:
    """Whether a failed request's body is an HTML page, not the API's words."""
    return isinstance(exc.body, str) and _html(exc.response.headers.get("content-type", ""), exc.body)


def _kind(response: Any) -> str:
    """What a body that is not JSON is, by its content type, and its status: "an HTML page (HTTP 502)",
    "a text/plain body (HTTP 200)"."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if _html(kind, response.text):
        what = "an HTML page"
    else:
        what = f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} body" if kind else "an untyped body"
    return f"{what} (HTTP {response.status_code})"


def _named(exc: BaseException) -> str:
    """An exception the client raised as a person reads it: its type and first line."""
    return _first_line(f"{type(exc).__name__}: {exc}")


def _tokens(usage: Any) -> Tokens:
    """The usage an endpoint reports; cached and reasoning counts where it gives them (OpenAI does)."""
    if usage is None:
        return Tokens()
    cached = getattr(usage.prompt_tokens_details, "cached_tokens", None)
    reasoning = getattr(usage.completion_tokens_details, "reasoning_tokens", None)
    return Tokens(usage.prompt_tokens or 0, usage.completion_tokens or 0, cached or 0, reasoning or 0)


def _context_exceeded(exc: openai.BadRequestError) -> bool:
    """OpenAI's code, or the wording of vLLM, SGLang and llama.cpp, for a prompt over the context."""
    body = exc.body if isinstance(exc.body, dict) else {}
    inner = body.get("error", body)
    code = inner.get("code") if isinstance(inner, dict) else None
    text = _message(exc).lower()
    return code == "context_length_exceeded" or "context length" in text or "context window" in text \
        or "maximum context" in text


@dataclass
class Answer:
    """One completion, from a whole response or assembled from a stream."""

    content: str
    reasoning: str
    finish_reason: Optional[str]
    usage: Any


def _reasoning(message: Any) -> str:
    """Reasoning the server returns apart: vLLM and SGLang's `reasoning_content`, Ollama's
    `reasoning` (on a message, or on a stream's delta)."""
    extra = getattr(message, "model_extra", None) or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    return reasoning if isinstance(reasoning, str) else ""


def _answer(response: Any) -> Answer:
    choice = response.choices[0]
    return Answer(choice.message.content or "", _reasoning(choice.message), choice.finish_reason, response.usage)


def _assembled(chunks: Iterable[Any]) -> Optional[Answer]:
    """A streamed answer put together: content and reasoning from the deltas, the finish
    reason from the last choice, the usage from the event that has it."""
    content, reasoning, finish, usage, choices = [], [], None, None, False
    for chunk in chunks:
        usage = getattr(chunk, "usage", None) or usage
        for choice in chunk.choices or []:
            choices = True
            if choice.delta is not None:
                content.append(choice.delta.content or "")
                reasoning.append(_reasoning(choice.delta))
            finish = choice.finish_reason or finish
    return Answer("".join(content), "".join(reasoning), finish, usage) if choices else None


def _with_reasoning(content: str, reasoning: str) -> str:
    """The answer with its reasoning in `<think>` tags, so runs/ keeps it."""
    if reasoning.strip():
        return f"<think>\n{reasoning.strip()}\n</think>\n\n{content}"
    return content
