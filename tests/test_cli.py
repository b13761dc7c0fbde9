"""The command line's surface: help for every flag and command, --version, typo suggestions,
--device cuda:N, and one error path (`error: ...` on stderr, exit 2) for every command's bad input."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.cli.config import ConfigError, pin_gpu
from harness.cli.main import build_parser, main
from harness.errors import HarnessError
from harness.version import __version__

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "problems" / "small_layernorm.py"


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by name."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_a_description_and_every_flag_a_help_text():
    parser = build_parser()
    empty = []
    for name, command in commands(parser).items():
        if not (command.description or "").strip():
            empty.append(f"{name}: no description")
        for action in command._actions:
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                empty.append(f"{name} {'/'.join(action.option_strings) or action.dest}: no help")
    assert not empty, "\n".join(empty)
    assert {"eval", "run", "sweep", "runs", "show", "replay", "plot", "compare", "promote", "export", "doctor",
            "profile"} <= set(commands(parser))


def test_run_help_is_grouped():
    text = commands(build_parser())["run"].format_help()
    titles = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    for group in ("model", "loop", "evaluation", "output"):
        assert any(title.startswith(group) for title in titles), titles
    # the evaluation group holds eval's flags, not the loop's
    evaluation = text.split("\nevaluation")[1].split("\noutput")[0]
    assert "--time-cap" in evaluation and "--rounds" not in evaluation


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"harness {__version__}"


@pytest.mark.parametrize("argv, usage, guess", [
    (["run", str(SMALL), "--rouns", "2"], "usage: harness run", "did you mean --rounds?"),
    (["eval", str(SMALL), "c.py", "--devce", "cpu"], "usage: harness eval", "did you mean --device?"),
    (["show", "r", "--sorce"], "usage: harness show", "did you mean --source?"),
])
def test_a_mistyped_flag_gets_a_suggestion_and_its_commands_usage(argv, usage, guess, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith(usage) and guess in err, err


def test_an_unknown_word_gets_no_suggestion(capsys):
    with pytest.raises(SystemExit):
        main(["runs", "--zzzzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_device_cuda_n_pins_gpu_n_counted_as_torch_counts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr("harness.device.nvidia_smi", lambda query: [])  # no driver here: any index is taken
    args = build_parser().parse_args(["eval", str(SMALL), "c.py", "--device", "cuda:1"])
    pin_gpu(args)
    assert (args.device, args.gpus) == ("cuda", "5")
    args = build_parser().parse_args(["eval", str(SMALL), "c.py", "--device", "cuda:1", "--gpus", "3"])
    with pytest.raises(ConfigError, match="name different GPUs"):
        pin_gpu(args)
    args = build_parser().parse_args(["eval", str(SMALL), "c.py", "--device", "cuda:2"])
    with pytest.raises(HarnessError, match="names no GPU"):
        pin_gpu(args)


def test_a_renamed_command_names_its_new_name(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["bench", "problems", "--copies"])
    assert exited.value.code == 2 and "`harness bench` is now `harness sweep`" in capsys.readouterr().err


def test_device_must_be_cpu_cuda_or_cuda_n(capsys):
    with pytest.raises(SystemExit):
        main(["eval", str(SMALL), "c.py", "--device", "gpu0"])
    assert "must be cpu, cuda or cuda:N" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["eval", str(SMALL), "nope.py", "--device", "cpu"], "Candidate file nope.py does not exist"),
    (["profile", str(SMALL), "nope.py", "--device", "cpu"], "nope.py does not exist"),
    (["profile", str(SMALL), "--device", "cpu"], "Name a candidate file to profile"),
    (["run", "--dry-run", "--resume", "nowhere"], "--dry-run takes a problem file"),
    (["run", "nope.py", "--proposer", "files", "--files", "x.py", "--device", "cpu"], "nope.py"),
    (["sweep", "nowhere", "--copies", "--device", "cpu"], "nowhere"),
    (["show", "nowhere"], "nowhere"),
    (["replay", "nowhere", "--device", "cpu"], "nowhere"),
    (["plot", "nowhere"], "nowhere"),
    (["compare", "nowhere", "elsewhere"], "nowhere"),
    (["promote", "nowhere"], "nowhere"),
    (["export", "nowhere", "--name", "lib::op"], "nowhere"),
    (["eval", str(SMALL), str(SMALL), "--device", "cpu", "--gpus", "a,b"], "--gpus takes GPU indices"),
])
def test_bad_input_is_one_error_on_stderr_and_exit_2(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/ and kernels/ here are empty
    assert main(argv + (["--runs-dir", str(tmp_path)] if argv[0] in ("show", "plot", "compare", "promote")
                        else [])) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and says in err and "Traceback" not in err, (out, err)
    assert "error" not in out.lower(), out
