"""The proposer kinds' registry, and the command kind: a program of one's own that answers each prompt,
run for real (a small Python script) through `harness run` on CPU."""
import json
import shlex
import sys

import pytest

from harness import Settings
from harness.cli.config import ConfigError, resolve
from harness.cli.run_command import main
from harness.loop.proposers import kinds
from harness.loop.proposers.base import Conversation, OutOfTime, ProposerError
from harness.loop.proposers.command import CommandProposer

from test_loop import FAST, PROBLEM, eval_flags, only_run, run_json


def command_of(*words) -> str:
    return " ".join(shlex.quote(str(w)) for w in (sys.executable, *words))


def script(tmp_path, body: str) -> str:
    path = tmp_path / "answer.py"
    path.write_text("import sys, time\n" + body)
    return command_of(path)


def ask(command: str, timeout: float = 30.0, time_left=None):
    conversation = Conversation(system="sys", turns=[], prompt="the problem")
    return CommandProposer(command, timeout).propose(conversation, print, time_left)


def test_the_registry_names_the_choices_and_implies_a_kind_from_what_is_given(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert kinds.names() == ["openai", "human", "files", "command"]  # the agent's runs are harness mcp's alone
    assert kinds.get("agent (mcp)").offered is False
    assert [k.name for k in kinds.KINDS if k.asks_model] == ["openai"]
    assert [k.name for k in kinds.KINDS if k.attended] == ["human"]
    implied = kinds.implied
    assert implied(Settings()) is None
    assert implied(Settings(model="m")).name == "openai"
    assert implied(Settings(model="m", files=["a.py"])).name == "files"  # what the person gave comes first
    assert implied(Settings(model="m", command="python x.py")).name == "command"
    assert resolve({"device": "cpu", "command": "python x.py"}).proposer == "command"
    with pytest.raises(ProposerError, match="No proposer is named `gpt`: --proposer takes openai, human"):
        kinds.get("gpt")


def test_the_command_kinds_settings_are_checked_with_the_others():
    with pytest.raises(ConfigError) as caught:
        resolve({"device": "cpu", "proposer": "command", "samples": 0})
    assert str(caught.value) == ("Cannot start the run: the command proposer needs a program to run: give "
                                 "--command \"PROGRAM ARGS\" or `command` in [run]; --samples must be at least 1, "
                                 "not 0.")
    with pytest.raises(ConfigError, match="--command `python 'x.py` does not split into words: No closing "
                                          "quotation"):
        resolve({"device": "cpu", "proposer": "command", "command": "python 'x.py"})
    assert kinds.dry_run(Settings(proposer="command", command="python x.py")) == (
        "A run would run `python x.py` with the user prompt above on its stdin and take its stdout as the answer.")


def test_a_failing_command_says_which_how_and_its_stderrs_end(tmp_path):
    command = script(tmp_path, "sys.stdin.read()\nprint('x' * 2000, file=sys.stderr)\n"
                               "print('Traceback:\\n  ValueError: no kernel today', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(ProposerError) as caught:
        ask(command)
    message = str(caught.value)
    assert message.startswith(f"The command `{command}` exited with status 3 instead of answering. Its stderr ends: ")
    assert message.endswith("Traceback: ValueError: no kernel today\".") and len(message) < 800
    with pytest.raises(ProposerError, match=r"did not answer within 0.5 s; raise --request-timeout"):
        ask(script(tmp_path, "time.sleep(30)\n"), timeout=0.5)
    with pytest.raises(OutOfTime, match="still running when the wall time ran out"):
        ask(script(tmp_path, "time.sleep(30)\n"), time_left=0.5)
    with pytest.raises(ProposerError, match="cannot be started"):
        ask("/nonexistent/program")


def test_a_command_run_reaches_the_target(tmp_path, cache_dir, capsys):
    answer = tmp_path / "answer.md"
    answer.write_text(f"Vectorised: tanh on the whole tensor at once.\n\n```python\n{FAST}```\n")
    seen = tmp_path / "seen.txt"
    command = script(tmp_path, f"open({str(seen)!r}, 'w').write(sys.stdin.read())\n"
                               f"print(open({str(answer)!r}).read())\n")
    runs = tmp_path / "runs"
    rc = main([str(PROBLEM), "--proposer", "command", "--command", command, "--runs-dir", str(runs),
               *eval_flags(cache_dir)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "proposer command, asked for with --proposer" in out and "Target 2.0x reached in round 1" in out
    assert "model" not in out.split("round 1:")[1].splitlines()[0]  # no endpoint: no model time in the round line
    assert "Write a faster version of the PyTorch model" in seen.read_text()  # the prompt came on stdin
    path = only_run(runs)
    record = run_json(path)
    assert (record["settings"]["proposer"], record["settings"]["command"]) == ("command", command)
    assert [r["verdict"] for r in record["rounds"]] == ["correct"]
    sample = json.loads((path / "rounds" / "001" / "round.json").read_text())["samples"][0]
    assert (sample["origin"], sample["extraction"]) == (f"command:{command}", "ok")
    assert (path / "rounds" / "001" / "candidate.py").read_text() == FAST


def test_a_command_that_is_no_program_is_refused_before_anything_is_made(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main([str(PROBLEM), "--command", "no-such-program --fast", "--runs-dir", str(runs),
                 "--device", "cpu"]) == 2
    assert ("The command `no-such-program --fast` cannot be started: `no-such-program` is neither a program on "
            "PATH nor an executable file.") in capsys.readouterr().err
    assert not runs.exists()

