"""README's quickstarts work as written: every command of a block marked as a CPU quickstart runs,
in order, in a fresh directory beside the repository's files, the model ones against a local
OpenAI-compatible server (tests/fake_openai_server.py) standing where README points (a local
vLLM or Ollama, no key). Also: README's first two lines and .ci/run agree, and the example config
loads."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fake_openai_server import FakeOpenAI, Reply
from harness.cli.config import load_config
from harness.problem import load_problem
from harness.runs.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARK = "<!-- quickstart: tests/test_quickstart.py runs this block on a CPU -->"
LOCAL_SERVERS = ("http://localhost:8000/v1", "http://localhost:11434/v1")  # vLLM's and Ollama's
EXIT_SHORT = 1  # a run that found no acceptable candidate: a timing on a busy machine may read lower


def quickstart_commands(text: str) -> list[list[str]]:
    """The commands of the marked blocks, split as a shell would, comments dropped."""
    blocks = re.findall(re.escape(MARK) + r"\s*```[a-z]*\n(.*?)```", text, re.S)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()
            if shlex.split(line, comments=True)]


def test_marked_blocks_are_found():
    commands = quickstart_commands(README.read_text())
    assert len(commands) >= 4 and all(c[0] == "harness" for c in commands), commands
    assert {c[1] for c in commands} >= {"eval", "run", "sweep"}


def test_quickstarts_run_as_written(tmp_path, cache_dir):
    commands = quickstart_commands(README.read_text())
    for name in ("tests", "problems", "kernels", "examples"):  # what README's paths name, read-only
        (tmp_path / name).symlink_to(ROOT / name)
    models = {c[c.index("--model") + 1] for c in commands if "--model" in c}
    server = FakeOpenAI(models=sorted(models), key="none").start()  # "none": what the client sends keyless
    server.fallback = Reply("```python\n" + (ROOT / "tests/candidates/cpp_layernorm.py").read_text() + "```")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(PYTHONPATH=str(ROOT), HARNESS_CACHE_DIR=str(cache_dir), COLUMNS="200")
    try:
        for command in commands:
            argv = [server.url if arg in LOCAL_SERVERS else arg for arg in command[1:]]
            done = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=900)
            said = f"`{shlex.join(command)}` exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            allowed = (0, EXIT_SHORT) if argv[0] == "run" and "--dry-run" not in argv else (0,)
            assert done.returncode in allowed and "Traceback" not in done.stderr, said
            if argv[0] == "eval":
                assert "verdict  correct" in done.stdout, said
            if "--dry-run" in argv:
                assert "small_layernorm" in done.stdout or "Model" in done.stdout, said
    finally:
        server.stop()
    # The model's answer went through the loop: asked once, built, checked and recorded.
    assert server.requests and server.requests[0]["model"] in models
    rounds = list((tmp_path / "runs").glob("*/rounds/001/eval.json"))
    assert len(rounds) == 1 and json.loads(rounds[0].read_text())["verdict"] == "correct"
    results = [p for d in tmp_path.iterdir() if not d.is_symlink() for p in d.rglob("results.jsonl")]
    assert len(results) == 1 and results[0].read_text().count("\n") >= 3  # a line per copy


def test_first_lines_install_and_run_and_ci_runs_the_same():
    first, second = re.search(r"```\w*\n(.*?)```", README.read_text(), re.S).group(1).splitlines()[:2]
    torch = re.search(r"pip install (torch==\S+)", first).group(1)
    assert "pip install -e ." in first and "harness eval" in first, first
    assert "pip install -e '.[test]'" in second and second.endswith("python -m pytest"), second
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"pip install {torch}" in ci and "pip install -e '.[test]'" in ci
    assert re.search(r"^python -m pytest$", ci, re.M), ci


def test_example_config_loads():
    values = load_config(ROOT / "examples" / "harness.toml")
    settings = Settings(**values)
    assert settings.proposer == "openai" and settings.model and settings.base_url in LOCAL_SERVERS


def test_the_problem_template_loads_and_runs(tmp_path):
    source = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    path = tmp_path / "my_problem.py"
    path.write_text(source)
    problem = load_problem(path)  # parsed, as the harness reads it, without running it
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)  # our own template: safe to run here
    model = namespace["Model"](*namespace["get_init_inputs"]())
    out = model(*namespace["get_inputs"]())
    assert problem.name == "my_problem" and out.shape == (4096, 1024) and (out >= 0).all()
