"""The openai proposer against a local OpenAI-compatible server: real client, real HTTP."""
import socket
import time

import pytest

pytest.importorskip("openai")  # a dependency of the harness, absent on some GPU hosts that run only -m gpu

from fake_openai_server import HANG, KEY, MODEL, Reply, fake_openai  # noqa: F401  (fixture)
from harness.loop.proposers.base import Conversation, OutOfTime, ProposerError, Turn
from harness.loop.proposers.openai import OpenAIProposer

from conftest import SEEDS


def make(server, **kw) -> OpenAIProposer:
    options = dict(model=MODEL, api_key=KEY, base_url=server.url, max_retries=3, timeout=10)
    options.update(kw)
    return OpenAIProposer(**options)


def ask(proposer, conversation=None):
    return proposer.propose(conversation or Conversation("system text", [], "first prompt"),
                            lambda line: None)


def test_answers_a_recorded_seed_and_counts_tokens(fake_openai):
    seed = (SEEDS / "001_20d8256f19674b42.txt").read_text()
    fake_openai.answer(seed)
    proposal = ask(make(fake_openai, temperature=0.6, max_tokens=4096))
    assert proposal.answer == seed
    assert proposal.origin == f"openai:{MODEL}"
    assert proposal.tokens.completion == len(seed) // 4 and proposal.tokens.prompt > 0
    assert not proposal.cut_off
    sent = fake_openai.requests[0]
    assert sent["temperature"] == 0.6 and sent["max_tokens"] == 4096
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]


def test_options_left_unset_are_not_sent(fake_openai):
    fake_openai.answer("no code here")
    ask(make(fake_openai))
    assert "temperature" not in fake_openai.requests[0]
    assert "max_tokens" not in fake_openai.requests[0]


def test_conversation_is_multi_turn_with_a_window(fake_openai):
    fake_openai.answer("answer 4")
    turns = [Turn("problem", "answer 1"), Turn("feedback 1", "answer 2"), Turn("feedback 2", "answer 3")]
    ask(make(fake_openai, window=2), Conversation("sys", turns, "feedback 3"))
    messages = [(m["role"], m["content"]) for m in fake_openai.requests[0]["messages"]]
    # The problem always stays; then the last two exchanges, each answer with its feedback.
    assert messages == [("system", "sys"), ("user", "problem"),
                        ("assistant", "answer 2"), ("user", "feedback 2"),
                        ("assistant", "answer 3"), ("user", "feedback 3")]


def test_window_zero_keeps_every_turn():
    turns = [Turn("problem", "a1"), Turn("f1", "a2")]
    roles = [m["role"] for m in Conversation("sys", turns, "f2").messages(0)]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]


def test_reasoning_sent_apart_is_kept_in_think_tags(fake_openai):
    fake_openai.answer(Reply("final text", reasoning="weighing options"))
    proposal = ask(make(fake_openai))
    assert proposal.answer.startswith("<think>\nweighing options\n</think>")
    assert proposal.answer.endswith("final text")


def test_rate_limit_then_success(fake_openai):
    fake_openai.answer(Reply(status=429, content="Rate limit reached", headers={"retry-after-ms": "50"}),
                       "the answer")
    started = time.monotonic()
    proposal = ask(make(fake_openai))
    assert proposal.answer == "the answer"
    assert fake_openai.attempts == 2
    assert time.monotonic() - started < 5


def test_server_error_then_success(fake_openai):
    fake_openai.answer(Reply(status=503, content="overloaded", headers={"retry-after-ms": "10"}),
                       "the answer")
    assert ask(make(fake_openai)).answer == "the answer"


def test_persistent_server_errors_end_in_a_clear_error(fake_openai):
    fake_openai.fallback = Reply(status=500, content="boom", headers={"retry-after-ms": "10"})
    with pytest.raises(ProposerError, match="HTTP 500.*after retries: boom"):
        ask(make(fake_openai, max_retries=2))
    assert fake_openai.attempts == 3


def test_bad_key_is_a_clear_error(fake_openai):
    with pytest.raises(ProposerError) as caught:
        ask(make(fake_openai, api_key="sk-wrong"))
    message = str(caught.value)
    assert "401" in message and "rejected the API key" in message and "OPENAI_API_KEY" in message
    assert "sk-wrong" not in message
    assert fake_openai.attempts == 1  # not retried


def test_unknown_model_is_a_clear_error_listing_served_models(fake_openai):
    with pytest.raises(ProposerError) as caught:
        ask(make(fake_openai, model="no-such-model"))
    message = str(caught.value)
    assert "404" in message and "`no-such-model`" in message and f"It serves: {MODEL}" in message


def test_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proposer = OpenAIProposer(model=MODEL, api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1",
                              max_retries=0, timeout=5)
    with pytest.raises(ProposerError, match="Cannot reach the endpoint"):
        ask(proposer)


def test_answer_cut_at_the_token_limit_is_flagged(fake_openai):
    fake_openai.answer(Reply("<think>still going", finish_reason="length"))
    assert ask(make(fake_openai)).cut_off


def test_hanging_endpoint_fails_after_its_timeout_and_retries(fake_openai):
    fake_openai.fallback = HANG
    with pytest.raises(ProposerError, match=r"did not answer within the request timeout \(0.5 s\) in 2 attempt"):
        ask(make(fake_openai, timeout=0.5, max_retries=1))
    assert fake_openai.attempts == 2


def test_the_wall_time_cuts_a_request_in_flight(fake_openai):
    fake_openai.fallback = HANG
    proposer = make(fake_openai, timeout=600, max_retries=2)
    with pytest.raises(OutOfTime):
        proposer.propose(Conversation("system text", [], "first prompt"), lambda line: None, time_left=0.5)
    assert fake_openai.attempts == 1
