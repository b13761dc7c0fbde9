"""Settings: flags over a TOML file over defaults; keys only from the environment."""
import pytest

from harness.cli.config import ConfigError, load_config, parse_duration, resolve
from harness import Settings
from harness.cli.main import build_parser


def flags(**given):
    return {"device": "cpu", **given}


def test_durations():
    assert parse_duration(90) == 90.0
    assert parse_duration("30m") == 1800.0 and parse_duration("2h") == 7200.0
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_flags_override_the_file_which_overrides_defaults(tmp_path):
    config = tmp_path / "h.toml"
    config.write_text('[endpoint]\nmodel = "m1"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                      'temperature = 0.6\n[limits]\nrounds = 7\nwall_time = "30m"\ntarget = 3\n')
    s = resolve(flags(config=str(config), rounds=3))
    assert (s.model, s.rounds, s.wall_time, s.target, s.temperature) == ("m1", 3, 1800.0, 3.0, 0.6)
    assert (s.request_timeout, s.max_retries) == (600.0, 2)  # minutes, not hours, by default
    config.write_text('[endpoint]\nmodel = "m1"\nrequest_timeout = "5m"\nmax_retries = 0\n')
    s = resolve(flags(config=str(config), request_timeout=30.0))
    assert (s.request_timeout, s.max_retries) == (30.0, 0)
    assert s.proposer == "openai" and s.accept == 1.5


def test_default_proposer(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")  # a key alone names no model
    # nothing configured: no proposer is chosen for the person, and the refusal says how to choose
    with pytest.raises(ConfigError) as refused:
        resolve(flags())
    for how in ("--model NAME", "http://localhost:8000/v1", "http://localhost:11434/v1", "--proposer human",
                "--files", "--config"):
        assert how in str(refused.value)
    assert resolve(flags(proposer="human")).proposer == "human"
    # a dry run asks nobody: it needs no proposer, nor a model for the openai one
    assert resolve(flags(), dry_run=True).proposer == ""
    assert resolve(flags(proposer="openai"), dry_run=True).model is None
    assert resolve(flags(model="m")).proposer == "openai"
    assert resolve(flags(files=["a.py"])).proposer == "files"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="needs a model"):
        resolve(flags())


def test_resumed_settings_keep_what_was_stored_unless_given():
    stored = Settings(problem="/p.py", proposer="files", files=["/a.py"], rounds=5, device="cpu")
    s = resolve({"rounds": 8, "proposer": None, "files": None}, base=stored)
    assert (s.rounds, s.proposer, s.files) == (8, "files", ["/a.py"])


@pytest.mark.parametrize("text, message", [
    ('rounds = 3\n', "at the top level"),
    ('[limits]\nround = 3\n', "unknown key `round` in \\[limits\\]"),
    ('[limits]\nrounds = "three"\n', "rounds must be a whole number"),
    ('[endpoint]\napi_key = "sk-secret"\n', "holds an API key"),
    ('[limits\n', "is not valid TOML"),
])
def test_bad_files_are_clear_errors(tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(config)
    assert str(config) in str(caught.value) and "sk-secret" not in str(caught.value)


def test_inconsistent_settings_are_reported_together():
    with pytest.raises(ConfigError) as caught:
        resolve(flags(proposer="files", accept=3.0, target=2.0, rounds=0, max_retries=-1))
    message = str(caught.value)
    assert "--files" in message and "--accept" in message and "--rounds" in message
    assert "--max-retries" in message


def test_a_person_at_an_editor_has_no_round_limit_unless_asked():
    assert resolve(flags(proposer="human")).rounds is None
    assert resolve(flags(proposer="human", rounds=4)).rounds == 4


@pytest.mark.parametrize("argv, message", [
    (["eval", "p.py", "c.py", "--trials", "0"], "argument --trials: must be at least 1, not 0"),
    (["eval", "p.py", "c.py", "--time-cap", "-1"], "argument --time-cap: must be above 0, not -1"),
    (["eval", "p.py", "c.py", "--run-timeout", "0"], "argument --run-timeout: must be above 0, not 0"),
    (["eval", "p.py", "c.py", "--build-timeout", "soon"], "argument --build-timeout: must be a duration such as 600, 30m or 2h, not `soon`"),
    (["eval", "p.py", "c.py", "--jobs", "0"], "argument --jobs: must be at least 1, not 0"),
    (["run", "p.py", "--samples", "0"], "argument --samples: must be at least 1, not 0"),
    (["run", "p.py", "--rounds", "-2"], "argument --rounds: must be at least 1, not -2"),
    (["run", "p.py", "--window", "-1"], "argument --window: must be at least 0, not -1"),
    (["run", "p.py", "--wall-time", "0s"], "argument --wall-time: must be above 0, not 0s"),
    (["run", "p.py", "--request-timeout", "0"], "argument --request-timeout: must be above 0, not 0"),
    (["run", "p.py", "--max-retries", "-1"], "argument --max-retries: must be at least 0, not -1"),
    (["run", "p.py", "--accept", "0"], "argument --accept: must be above 0, not 0"),
    (["run", "p.py", "--token-budget", "1.5"], "argument --token-budget: must be a whole number, not `1.5`"),
    (["show", "r", "--round", "0"], "argument --round: must be at least 1, not 0"),
])
def test_impossible_numbers_are_refused_with_a_one_line_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


def test_a_target_below_the_default_accept_lowers_it_and_says_so():
    from harness.cli.config import accept_note

    s = resolve(flags(proposer="human", target=1.3))
    assert (s.accept, s.target) == (1.3, 1.3)
    note = ("--target 1.3 is below the acceptable 1.5x, so the acceptable speedup is 1.3x too (give --accept to set "
            "it apart).")
    assert accept_note(s) == note
    assert accept_note(resolve(flags(proposer="human"))) == ""
    assert accept_note(resolve(flags(proposer="human", target=1.3, accept=1.3))) == ""  # set by hand: nothing lowered
    # resumed: the bar stays lowered and is said the same way; a new target moves it, --accept sets it apart
    assert (resolve({}, base=s).accept, accept_note(resolve({}, base=s))) == (1.3, note)
    lowered = resolve({"target": 1.2}, base=s)
    assert (lowered.accept, lowered.accept_lowered_from) == (1.2, 1.5)
    raised = resolve({"target": 3.0}, base=s)
    assert (raised.accept, accept_note(raised)) == (1.5, "")
    assert (resolve({"accept": 1.1}, base=s).accept, accept_note(resolve({"accept": 1.1}, base=s))) == (1.1, "")
    with pytest.raises(ConfigError, match=r"accept 1.6 and target 1.3: lower --accept to 1.3 or less, or raise "
                                          r"--target to 1.6 or more"):
        resolve(flags(proposer="human", target=1.3, accept=1.6))
