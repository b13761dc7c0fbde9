"""Endpoints that fail as real ones do, through `harness run` on the CPU: each failure is one
paragraph on stderr, with an exit status by outcome, the reason kept in the run, and the exact
--resume command; never a traceback.

Runs use tests/problems/row_loop.py (no build): a plain-Python candidate is correct and fast.
"""
import json
from pathlib import Path

import pytest

from fake_openai_server import HANG, KEY, MODEL, Reply, fake_openai  # noqa: F401  (fixture)
from harness.cli.main import main as harness
from harness.cli.run_command import main

from conftest import PROBLEMS
from test_loop import FAST, SLOW

PROBLEM = PROBLEMS / "row_loop.py"
PAGE = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body><center>nginx</center></body>\n</html>\n"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def run(fake, tmp_path, cache_dir, capsys, *flags: str) -> tuple[int, str, str, Path]:
    runs = tmp_path / "runs"
    rc = main([str(PROBLEM), "--model", MODEL, "--base-url", fake.url, "--rounds", "3", "--runs-dir", str(runs),
               "--device", "cpu", "--time-cap", "0.5", "--cache-dir", str(cache_dir), *flags])
    out, err = capsys.readouterr()
    made = list(runs.iterdir()) if runs.exists() else []
    return rc, out, err, made[0] if made else None


def one_paragraph(err: str) -> str:
    assert "Traceback" not in err and err.startswith("error: ") and err.strip().count("\n") == 0, err
    return err


def stored(path: Path) -> dict:
    return json.loads((path / "run.json").read_text())


def test_an_html_page_with_status_200_is_quoted_and_kept(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.answer(Reply(raw=PAGE))
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys)
    assert rc == 3, out + err
    one_paragraph(err)
    assert "with an HTML page (HTTP 200), not the API's JSON" in err and '"502 Bad Gateway"' in err
    assert f"`harness run --resume {path}` carries it on" in err
    record = stored(path)
    assert (record["status"], record["stop_reason"], record["outcome"]) == ("failed", "proposer", "no_correct")
    assert '"502 Bad Gateway"' in record["message"] and "HTML page" in record["message"]
    assert harness(["show", str(path)]) == 0
    assert '"502 Bad Gateway"' in capsys.readouterr().out


def test_json_without_choices_is_an_error_on_stderr(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.answer(Reply(raw='{"object": "error", "detail": "model is loading"}',
                             content_type="application/json"))
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys)
    assert rc == 3 and "error" not in out, out
    one_paragraph(err)
    assert "JSON without `choices`" in err and "model is loading" in err
    assert "model is loading" in stored(path)["message"]


def test_a_server_error_shows_its_text_and_the_wait_is_capped(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.fallback = Reply(status=500, content="CUDA out of memory while loading the weights")
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, "--max-retries", "0", "--retry-for", "1")
    assert rc == 3, out + err
    one_paragraph(err)
    said = '"CUDA out of memory while loading the weights"'
    assert f"answered HTTP 500 after retries: {said}. Waiting 1 s" in out
    assert "Ctrl-C is safe, and --resume carries the run on" in out
    assert f"HTTP 500 for model `{MODEL}` after retries and 1 s of waiting (--retry-for 1 s): {said}" in err
    assert fake_openai.attempts == 2  # asked, waited out once within --retry-for, asked again
    assert said in stored(path)["message"]


def test_a_server_lost_after_an_acceptable_candidate_keeps_it(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.answer(f"```python\n{FAST}```", Reply(die=True))
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, "--target", "1000", "--accept", "1.2",
                             "--max-retries", "1")
    assert rc == 0, out + err  # an acceptable best is not an error
    one_paragraph(err)
    assert "Cannot reach the endpoint" in err and "is acceptable" in err
    assert f"the run keeps its 1 finished round(s) and its best" in err
    assert f"`harness run --resume {path}` carries it on" in err
    record = stored(path)
    assert record["best"]["round"] == 1 and record["outcome"] == "accepted"
    # show says what the exit said: what is kept, and the command that carries the run on
    assert harness(["show", str(path)]) == 0
    said = err[err.index("Nothing is lost: "):].strip()
    assert said.endswith("carries it on.") and said in capsys.readouterr().out
    assert (path / "rounds" / "002" / "prompt.md").is_file()  # the round in flight, set aside by --resume


def test_a_request_timeout_mid_run(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.fallback = HANG
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, "--request-timeout", "0.5",
                             "--max-retries", "0")
    assert rc == 3, out + err
    one_paragraph(err)
    assert "did not answer within the request timeout (0.5 s)" in err and "--resume" in err
    assert stored(path)["stop_reason"] == "proposer"


def test_a_connection_refused_at_the_start_makes_no_run(tmp_path, cache_dir, capsys, fake_openai):
    fake_openai.stop()
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys)
    assert rc == 2 and path is None, out + err
    one_paragraph(err)
    assert "Cannot reach the endpoint" in err and "Connection refused" in err


def said_of_the_endpoint(fake, err: str) -> None:
    """The paragraph names the endpoint and the model, and says what to check."""
    assert f"The endpoint {fake.url} " in err and f"model `{MODEL}`" in err
    assert "is --base-url the API's (an OpenAI-compatible server's ends in /v1)?" in err


@pytest.mark.parametrize("status", [200, 502])
def test_an_html_page_on_every_path_is_refused_before_any_round(tmp_path, cache_dir, capsys, fake_openai, status):
    fake_openai.every = Reply(raw=PAGE, status=status)  # the model list too: a proxy's page for whatever is asked
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, "--max-retries", "0")
    assert rc == 2 and path is None, out + err  # an endpoint that cannot serve the run at its start
    one_paragraph(err)
    said_of_the_endpoint(fake_openai, err)
    assert f"with an HTML page (HTTP {status}), not the API's JSON. Its body begins: \"502 Bad Gateway\"." in err
    assert fake_openai.attempts == 1 and not fake_openai.requests  # the model list, then one completion asked
    assert harness(["show", "latest", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "No run under" in capsys.readouterr().err


def test_a_model_list_the_client_cannot_read_leaves_the_completion_to_decide(tmp_path, cache_dir, capsys,
                                                                             fake_openai):
    # JSON of another shape: the client's parsing raises TypeError, not an OpenAIError, on the model list
    fake_openai.every = Reply(raw='{"data": 5}', content_type="application/json")
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys)
    assert rc == 2 and path is None, out + err
    one_paragraph(err)
    said_of_the_endpoint(fake_openai, err)
    assert "with JSON without `choices`, not a chat completion. Its body begins: \"{\"data\": 5}\"." in err


@pytest.mark.parametrize("status", [200, 502])
def test_an_html_page_later_in_a_run_keeps_what_was_recorded(tmp_path, cache_dir, capsys, fake_openai, status):
    fake_openai.answer(f"```python\n{SLOW}```")  # round 1: correct, below the bar
    fake_openai.fallback = Reply(raw=PAGE, status=status)
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, "--max-retries", "0", "--retry-for", "0")
    assert rc == 3, out + err  # failed mid-run with no acceptable candidate: --resume carries it on
    one_paragraph(err)
    said_of_the_endpoint(fake_openai, err)
    assert '"502 Bad Gateway"' in err and "HTML page" in err and "not the API's JSON" in err
    assert f"`harness run --resume {path}` carries it on" in err
    record = stored(path)
    assert (record["status"], record["stop_reason"], record["outcome"]) == ("failed", "proposer", "below_accept")
    assert record["best"]["round"] == 1 and record["message"] in err
    assert (path / "rounds" / "001" / "candidate.py").is_file()
    assert harness(["show", "latest", "--runs-dir", str(tmp_path / "runs")]) == 0
    shown = capsys.readouterr().out
    assert "status failed" in shown and '"502 Bad Gateway"' in shown


@pytest.mark.parametrize("reply, flags, raised", [
    # the client hands back `choices` as it came, and reading a choice raises AttributeError
    (Reply(raw='{"id": "x", "choices": "abc"}', content_type="application/json"), (), "AttributeError"),
    # an event that is not JSON: the client's stream decoder raises JSONDecodeError, a ValueError
    (Reply(raw="data: <html>\n\n", content_type="text/event-stream"), ("--stream",), "JSONDecodeError"),
], ids=["attribute-error", "json-decode-error"])
def test_an_exception_of_the_client_that_is_no_openai_error_ends_the_run_in_a_paragraph(
        tmp_path, cache_dir, capsys, fake_openai, reply, flags, raised):
    fake_openai.answer(f"```python\n{SLOW}```", reply)
    rc, out, err, path = run(fake_openai, tmp_path, cache_dir, capsys, *flags)
    assert rc == 3, out + err
    one_paragraph(err)
    said_of_the_endpoint(fake_openai, err)
    assert f"the client cannot read ({raised}: " in err
    record = stored(path)
    assert (record["status"], record["stop_reason"], record["best"]["round"]) == ("failed", "proposer", 1)
    assert raised in record["message"]
    events = [json.loads(line) for line in (path / "events.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "proposer_error" and e.get("round") == 2 for e in events), events
