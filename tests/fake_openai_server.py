"""A local OpenAI-compatible chat-completions server for tests.

Real HTTP on 127.0.0.1, so the real `openai` client is exercised end to end:
authentication (401), unknown models (404), scripted failures such as a 429
with Retry-After or a context-length error, an endpoint that never answers, and recorded
answers. Like some real endpoints it can refuse empty assistant turns and, for reasoning
models, `max_tokens`. A request with `stream: true` is answered with server-sent events:
the reasoning and the content in pieces, then the finish reason, then the usage where
`stream_options.include_usage` asks for it. Every request body is kept for asserts, with
its arrival time.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import pytest

KEY = "sk-test-key-0123456789"
MODEL = "fake-coder"


@dataclass
class Reply:
    """One scripted reply: an answer, or an HTTP error status."""

    content: str = ""
    status: int = 200
    headers: dict = field(default_factory=dict)
    finish_reason: str = "stop"
    reasoning: Optional[str] = None  # sent apart, as vLLM's `reasoning_content`
    code: str = "scripted"  # the error code of a failure, e.g. context_length_exceeded
    delay: float = 0.0  # seconds before the answer is sent
    hang: bool = False  # never answer: hold the connection until the server stops
    # answer only once this many chat requests have arrived (or after 60 s): requests in flight together
    hold_until: int = 0
    raw: Optional[str] = None  # sent as the body itself, with `status` and `content_type`
    content_type: str = "text/html"
    die: bool = False  # the server stops: this request's connection is dropped, later ones refused


HANG = Reply(hang=True)


class FakeOpenAI:
    def __init__(self, models=(MODEL,), key: str = KEY):
        self.models = list(models)
        self.key = key
        self.refuse_empty_turns = False  # HTTP 400 for an empty assistant message
        self.reasoning_models: set[str] = set()  # models that refuse max_tokens, as OpenAI's o-series
        self.arrivals: list[float] = []  # time.monotonic() of every chat request
        self.replies: list[float] = []  # time.monotonic() as each answer is sent
        self.lock = threading.Lock()
        self.script: deque[Reply] = deque()
        self.fallback: Optional[Reply] = None  # served when the script is empty
        # Answered to every request, on every path (the model list too), before any check: a proxy's
        # error page in front of a server that is down, or a base URL that is not the API's.
        self.every: Optional[Reply] = None
        self.requests: list[dict] = []  # bodies of chat requests that passed auth and model checks
        self.attempts = 0  # every chat request, failed ones included
        self.stopping = threading.Event()  # releases hanging requests
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, *replies: Reply | str) -> None:
        self.script.extend(r if isinstance(r, Reply) else Reply(r) for r in replies)

    def start(self) -> "FakeOpenAI":
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:  # once, whether a test or a `die` reply stops it first
            if self.stopping.is_set():
                return
            self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def _next(self) -> Reply:
        if self.script:
            return self.script.popleft()
        if self.fallback:
            return self.fallback
        return Reply(status=500, content="the test scripted no more answers")

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict, headers: Optional[dict] = None):
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _send_raw(self, status: int, text: str, content_type: str):
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, message: str, code: str, headers=None):
                self._send(status, {"error": {"message": message, "type": "invalid_request_error",
                                              "param": None, "code": code}}, headers)

            def _authorised(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {fake.key}":
                    return True
                self._error(401, "Incorrect API key provided.", "invalid_api_key")
                return False

            def _every(self) -> bool:
                if fake.every is None:
                    return False
                self._send_raw(fake.every.status, fake.every.raw or "", fake.every.content_type)
                return True

            def do_GET(self):
                if self._every() or not self._authorised():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                        for m in fake.models]})
                else:
                    self._error(404, f"Unknown path {self.path}", "not_found")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.attempts += 1
                    fake.arrivals.append(time.monotonic())
                if self._every() or not self._authorised():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._error(404, f"Unknown path {self.path}", "not_found")
                if body.get("model") not in fake.models:
                    return self._error(
                        404, f"The model `{body.get('model')}` does not exist or you do not have "
                        "access to it.", "model_not_found")
                if fake.refuse_empty_turns and any(
                        m["role"] == "assistant" and not m["content"].strip() for m in body["messages"]):
                    return self._error(400, "Invalid 'messages': an assistant message must have "
                                       "non-empty content.", "invalid_value")
                if body["model"] in fake.reasoning_models and "max_tokens" in body:
                    return self._error(400, "Unsupported parameter: 'max_tokens' is not supported with "
                                       "this model. Use 'max_completion_tokens' instead.",
                                       "unsupported_parameter")
                with fake.lock:
                    reply = fake._next()
                if reply.hang:
                    fake.stopping.wait()
                    return
                if reply.die:
                    threading.Thread(target=fake.stop, daemon=True).start()
                    self.close_connection = True
                    return
                waited = time.monotonic()
                while len(fake.arrivals) < reply.hold_until and time.monotonic() - waited < 60:
                    if fake.stopping.wait(0.02):
                        return
                time.sleep(reply.delay)
                if reply.raw is not None:
                    return self._send_raw(reply.status, reply.raw, reply.content_type)
                if reply.status != 200:
                    return self._error(reply.status, reply.content or "scripted failure",
                                       reply.code, reply.headers)
                with fake.lock:
                    fake.requests.append(body)
                    fake.replies.append(time.monotonic())
                prompt_tokens = sum(len(m["content"]) for m in body["messages"]) // 4
                completion_tokens = max(1, len(reply.content) // 4)
                reasoning_tokens = len(reply.reasoning or "") // 4
                message = {"role": "assistant", "content": reply.content}
                if reply.reasoning is not None:
                    message["reasoning_content"] = reply.reasoning
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens,
                         # as OpenAI reports them: the prefix served from its cache, reasoning
                         "prompt_tokens_details": {"cached_tokens": len(body["messages"][0]["content"]) // 4},
                         "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}
                head = {"id": f"chatcmpl-{fake.attempts}", "created": int(time.time()), "model": body["model"]}
                if body.get("stream"):
                    return self._stream(head, reply, usage if (body.get("stream_options") or {}).get(
                        "include_usage") else None)
                self._send(200, {**head, "object": "chat.completion",
                                 "choices": [{"index": 0, "message": message,
                                              "finish_reason": reply.finish_reason}],
                                 "usage": usage})

            def _stream(self, head: dict, reply: Reply, usage: Optional[dict]):
                """The answer as server-sent events, a few characters at a time."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # no length: the body ends when the connection closes

                def event(choices: list, **extra):
                    chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()

                event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
                for key, text in (("reasoning_content", reply.reasoning or ""), ("content", reply.content)):
                    for i in range(0, len(text), 7):
                        event([{"index": 0, "delta": {key: text[i:i + 7]}, "finish_reason": None}])
                event([{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}])
                if usage is not None:
                    event([], usage=usage)
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler


@pytest.fixture
def fake_openai():
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()
