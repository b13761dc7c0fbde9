"""The openai proposer against a local OpenAI-compatible server: real client, real HTTP."""
import socket
import time

import pytest

pytest.importorskip("openai")  # a dependency of the harness, absent on some GPU hosts that run only -m gpu

from fake_openai_server import HANG, KEY, MODEL, Reply, fake_openai  # noqa: F401  (fixture)
from harness.loop.extract import strip_reasoning
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


def test_reasoning_sent_apart_is_kept_in_think_tags_and_never_sent_back(fake_openai):
    fake_openai.answer(Reply("final text", reasoning="weighing options"))
    proposal = ask(make(fake_openai))
    assert proposal.answer.startswith("<think>\nweighing options\n</think>")
    assert proposal.answer.endswith("final text")
    fake_openai.answer("next")
    ask(make(fake_openai), Conversation("sys", [Turn("problem", strip_reasoning(proposal.answer))], "f1"))
    assert "weighing options" not in str(fake_openai.requests[1]["messages"])


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
    with pytest.raises(ProposerError, match=r"HTTP 500.*after retries and 0 s of waiting \(--retry-for 0 s\): \"boom\""):
        ask(make(fake_openai, max_retries=2, patience=0))
    assert fake_openai.attempts == 3


def test_busy_endpoint_is_waited_out_after_the_retries(fake_openai):
    fake_openai.answer(*[Reply(status=429, content="busy", headers={"retry-after-ms": "10"})] * 2,
                       Reply(status=503, content="overloaded", headers={"retry-after-ms": "10"}), "the answer")
    said = []
    proposer = make(fake_openai, max_retries=0, patience=5, first_wait=0.05)
    answer = proposer.propose(Conversation("sys", [], "first"), said.append).answer
    assert answer == "the answer" and fake_openai.attempts == 4
    assert [line.split(". Waiting")[0] for line in said] == ['The endpoint answered HTTP 429 after retries: "busy"'] \
        * 2 + ['The endpoint answered HTTP 503 after retries: "overloaded"']
    assert all("Ctrl-C is safe, and --resume carries the run on" in line for line in said)


def test_empty_answers_are_sent_as_a_placeholder(fake_openai):
    fake_openai.refuse_empty_turns = True
    fake_openai.answer("answer 3")
    turns = [Turn("problem", "", n=1), Turn("feedback 1", "  ", n=2)]
    assert ask(make(fake_openai), Conversation("sys", turns, "feedback 2")).answer == "answer 3"
    sent = [m["content"] for m in fake_openai.requests[0]["messages"] if m["role"] == "assistant"]
    assert sent == ["(no answer)", "(no answer)"]


def test_reasoning_model_gets_max_completion_tokens(fake_openai):
    fake_openai.reasoning_models = {MODEL}
    fake_openai.answer("first", "second")
    said = []
    proposer = make(fake_openai, max_tokens=512, reasoning_effort="high")
    proposer.propose(Conversation("sys", [], "p"), said.append)
    proposer.propose(Conversation("sys", [], "p"), said.append)
    assert fake_openai.attempts == 3  # refused once, then asked the right way every time
    for sent in fake_openai.requests:
        assert sent["max_completion_tokens"] == 512 and "max_tokens" not in sent
        assert sent["reasoning_effort"] == "high"
    assert said == [f"{MODEL} refuses max_tokens; asking with max_completion_tokens."]
    fake_openai.answer("third")
    make(fake_openai, max_tokens=512, token_param="max_completion_tokens",
         extra_body={"top_k": 20}).propose(Conversation("sys", [], "p"), said.append)
    assert fake_openai.attempts == 4 and fake_openai.requests[-1]["top_k"] == 20


def test_context_length_error_shrinks_the_window(fake_openai):
    fake_openai.answer(Reply(status=400, code="context_length_exceeded",
                             content="This model's maximum context length is 8192 tokens. However, "
                                     "your messages resulted in 9100 tokens."), "fits now")
    turns = [Turn("problem", f"answer {n}", n=n) for n in range(1, 5)]
    proposer = make(fake_openai)
    assert ask(proposer, Conversation("sys", turns, "feedback 4")).answer == "fits now"
    assistants = [m["content"] for m in fake_openai.requests[0]["messages"] if m["role"] == "assistant"]
    assert assistants == ["answer 3", "answer 4"] and proposer.window == 2


def test_pinned_best_follows_the_first_prompt_when_outside_the_window():
    turns = [Turn("problem", "a1", n=1), Turn("f1", "a2", n=2), Turn("f2", "a3", n=3)]
    best = Turn("Round 1's candidate above is the best so far.", "a1", n=1)
    messages = [(m["role"], m["content"]) for m in Conversation("sys", turns, "f3", pinned=best).messages(1)]
    assert messages == [("system", "sys"), ("user", "problem"), ("assistant", "a1"),
                        ("user", best.prompt), ("assistant", "a3"), ("user", "f3")]
    # in the window, it is not sent twice
    assert len(Conversation("sys", turns, "f3", pinned=best).messages(0)) == 8


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


def test_streaming_assembles_content_reasoning_usage_and_the_finish_reason(fake_openai):
    seed = (SEEDS / "001_20d8256f19674b42.txt").read_text()
    fake_openai.answer(Reply(seed, reasoning="weighing options " * 5),
                       Reply("cut short", finish_reason="length"))
    proposer = make(fake_openai, stream=True)
    proposal = ask(proposer)
    sent = fake_openai.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert proposal.answer == f"<think>\n{('weighing options ' * 5).strip()}\n</think>\n\n{seed}"
    assert proposal.tokens.completion == len(seed) // 4 and proposal.tokens.prompt > 0
    assert proposal.tokens.reasoning == len("weighing options " * 5) // 4 and not proposal.cut_off
    assert ask(proposer).cut_off


def test_stream_is_a_config_and_flag_setting(tmp_path):
    from harness.cli.config import ConfigError, load_config, resolve

    config = tmp_path / "h.toml"
    config.write_text('[endpoint]\nmodel = "m"\nstream = true\n[limits]\nbeam = 3\n')
    assert load_config(config) == {"model": "m", "stream": True, "beam": 3}
    assert resolve({"config": str(config), "device": "cpu"}).stream is True
    config.write_text('[endpoint]\nstream = "yes"\n')
    with pytest.raises(ConfigError, match=r"h\.toml, \[endpoint\]: stream must be true or false"):
        load_config(config)
