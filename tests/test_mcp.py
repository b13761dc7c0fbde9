"""`harness mcp` through the SDK's own client: over stdio, as an agent's client starts it, and over
HTTP behind its token. CPU problems and candidates; the C++ build is shared with the other tests
through the session's cache."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from harness.agent.devices import Cancelled, Devices, Job  # noqa: E402
from harness.agent.judge import OPTIONS  # noqa: E402
from harness.agent.server import Options  # noqa: E402
from harness.engine.options import EvalOptions  # noqa: E402

from conftest import CANDIDATES, PROBLEMS, REPO  # noqa: E402
from test_history import cli  # noqa: E402

SMALL = str((PROBLEMS / "small_layernorm.py").relative_to(REPO))
CPP = str((CANDIDATES / "cpp_layernorm.py").relative_to(REPO))
WRONG = str((CANDIDATES / "py_wrong.py").relative_to(REPO))
CORRECT = str((CANDIDATES / "py_correct.py").relative_to(REPO))
TOOLS = {"describe_problem", "evaluate", "profile", "start_run", "history", "best", "show_round"}


def flags(cache_dir: Path, runs_dir: Path) -> list[str]:
    return ["--device", "cpu", "--time-cap", "0.5", "--trials", "2", "--cache-dir", str(cache_dir),
            "--runs-dir", str(runs_dir)]


def stdio(*options: str) -> Client:
    """A client of `harness mcp OPTIONS` started over stdio in the repository, as an agent's client starts it."""
    args = ["-m", "harness", "mcp", *options]
    return Client(stdio_client(StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO),
                                                     env=dict(os.environ))))


def text(result) -> str:
    return result.content[0].text


def test_a_session_describes_evaluates_and_refuses_bad_input_in_one_paragraph(cache_dir, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text((CANDIDATES / "py_correct.py").read_text())
    seen: list[str] = []
    phases: list[tuple[str, str]] = []  # (call, phase) in the order the notifications came

    async def progress(step: float, total, message) -> None:
        seen.append(message)

    async def session() -> dict:
        async with stdio(*flags(cache_dir, tmp_path / "runs")) as client:
            said = {"tools": {tool.name: tool for tool in (await client.list_tools()).tools}}
            said["describe"] = await client.call_tool("describe_problem", {"problem": SMALL})

            async def call(name: str, path: str) -> None:  # two at once, as two agents would
                async def told(step: float, total, message) -> None:
                    phases.append((name, message))

                said[name] = await client.call_tool("evaluate", {"problem": SMALL, "path": path},
                                                    progress_callback=told)

            async with anyio.create_task_group() as group:
                group.start_soon(call, "correct", CPP)
                group.start_soon(call, "python", CORRECT)
            said["profile"] = await client.call_tool("profile", {"problem": SMALL, "path": CPP})
            said["wrong"] = await client.call_tool("evaluate", {"problem": SMALL, "path": WRONG})
            said["syntax"] = await client.call_tool("evaluate", {"problem": SMALL, "source": "class ModelNew(:\n"},
                                                    progress_callback=progress)
            said["syntax_progress"] = list(seen)
            said["outside"] = await client.call_tool("evaluate", {"problem": SMALL, "path": str(outside)})
            said["missing"] = await client.call_tool("evaluate", {"problem": "tests/problems/nothing.py", "path": CPP})
            said["big"] = await client.call_tool("evaluate", {"problem": SMALL, "source": "#" * (2 << 20)})
            said["unknown_run"] = await client.call_tool("evaluate", {"problem": SMALL, "path": CPP, "run": "no-such"})
            return said

    said = anyio.run(session)
    tools = said["tools"]
    assert set(tools) == TOOLS
    assert all(tool.description and tool.input_schema["type"] == "object" for tool in tools.values())
    assert not [tool.name for tool in tools.values() if "\n " in tool.description]  # read as written, unindented
    assert {"problem", "source", "path", "run", "options"} <= set(tools["evaluate"].input_schema["properties"])

    described = said["describe"]
    assert not described.is_error
    assert "## Rules" in text(described) and "`x`: cpu float32 (8, 16, 32)" in text(described)
    assert "The reference alone, on each clock this device has: host time" in text(described)
    assert described.structured_content["inputs"] == ["`x`: cpu float32 (8, 16, 32), contiguous"]
    assert set(described.structured_content["reference"]) == {"host"}

    correct = said["correct"]
    assert said["python"].structured_content["result"]["verdict"] == "correct", text(said["python"])
    assert not correct.is_error, text(correct)
    assert ": correct\nThe candidate built" in text(correct) and "## How it was timed" in text(correct)
    assert correct.structured_content["result"]["verdict"] == "correct"
    assert "samples" not in correct.structured_content["result"]["timings"]["candidate"]
    assert {"building", "checking", "timing"} <= {phase for call, phase in phases if call == "correct"}
    # one candidate at a time past its build: the other's check never comes amid this one's
    on_device = [call for call, phase in phases if phase in ("checking", "timing", "checking other shapes")]
    assert on_device == sorted(on_device, key=on_device.index), phases

    profiled = said["profile"]  # no ncu on a CPU: the torch profiler's ops, and why
    assert not profiled.is_error and profiled.structured_content["profile"]["tool"] == "torch-cpu", text(profiled)
    assert text(profiled).startswith("No ncu profile on the CPU") and "Profile of one forward" in text(profiled)
    sampling = profiled.structured_content["profile"]["sampling"]  # perf's, where it may sample here
    assert sampling["note"] or "| layer_norm | cpp_layernorm_test.so |" in text(profiled)

    wrong = said["wrong"]
    assert not wrong.is_error and wrong.structured_content["result"]["verdict"] == "incorrect"
    assert ": incorrect\nThe candidate ran but its outputs do not match the reference." in text(wrong)
    assert "Fix correctness first" in text(wrong)

    assert said["syntax"].is_error and said["syntax_progress"] == []  # refused before any build
    assert "The candidate's source was refused before any build: the file does not parse" in text(said["syntax"])
    assert said["outside"].is_error and f"Candidate file {outside} is outside the directories" in text(said["outside"])
    assert said["missing"].is_error and "nothing.py does not exist" in text(said["missing"])
    assert said["big"].is_error and "over the limit of 1,048,576" in text(said["big"])
    assert said["unknown_run"].is_error and "No run matches 'no-such'" in text(said["unknown_run"])
    for refusal in ("syntax", "outside", "missing", "big", "unknown_run"):
        assert "Traceback" not in text(said[refusal]) and "\n" not in text(said[refusal]).strip()


def test_a_run_of_two_rounds_reads_back_as_harness_runs_do(cache_dir, tmp_path):
    runs_dir = tmp_path / "runs"

    async def session() -> dict:
        async with stdio(*flags(cache_dir, runs_dir)) as client:
            started = await client.call_tool("start_run", {"problem": SMALL, "accept": 0.01, "target": 0.01})
            run = started.structured_content["run"]
            said = {"started": started,
                    "first": await client.call_tool("evaluate", {"problem": SMALL, "path": WRONG, "run": run,
                                                                 "note": "forgets the bias"}),
                    "second": await client.call_tool("evaluate", {"problem": SMALL, "path": CPP, "run": run[:20]}),
                    "history": await client.call_tool("history", {"run": run}),
                    "best": await client.call_tool("best", {}),
                    "round": await client.call_tool("show_round", {"run": run, "round": 1}),
                    "options": await client.call_tool("evaluate", {"problem": SMALL, "path": CPP, "run": run,
                                                                   "options": {"trials": 3}})}
            return said

    said = anyio.run(session)
    assert not said["started"].is_error, text(said["started"])
    run = said["started"].structured_content["run"]
    first, second = said["first"], said["second"]
    assert first.structured_content["round"] == 1 and first.structured_content["stop"] == ""
    assert "No stop rule holds yet" in text(first)
    assert second.structured_content["round"] == 2 and second.structured_content["stop"] == "target"
    assert "Target 0.01x reached in round 2" in text(second) and "You can stop" in text(second)
    assert "| 1 | incorrect | - |" in text(said["history"]) and "forgets the bias" in text(said["history"])
    assert said["best"].structured_content["round"] == 2 and "load_inline" in said["best"].structured_content["source"]
    assert "## Round 1: incorrect" in text(said["round"]) and "Its candidate" in text(said["round"])
    assert said["options"].is_error and "leave `options` out" in text(said["options"])

    # the server has ended: the run is settled and shows as `harness run`'s do
    rc, out = cli("show", run, "--runs-dir", str(runs_dir))
    assert rc == 0, out
    assert "proposer agent (mcp)" in out and "finished, stopped by target, outcome target" in out
    assert "incorrect" in out and "2 *" in out  # two rounds, the second the best
    rc, out = cli("report", run, "--runs-dir", str(runs_dir))
    assert rc == 0 and (runs_dir / run / "report.html").is_file(), out
    assert "agent (mcp)" in (runs_dir / run / "report.html").read_text()
    assert (runs_dir / run / "rounds" / "002" / "prompt.md").read_text().startswith("## Round 1: incorrect")


def test_a_cancelled_evaluation_ends_its_candidate_and_frees_the_device(cache_dir, tmp_path):
    """A candidate that never returns, cancelled while it is checked: its worker is ended at once, so the
    next call times on the device without waiting for the run timeout (600 s here)."""
    checking = anyio.Event()

    async def progress(step: float, total, message) -> None:
        if message == "checking":
            checking.set()

    async def session():
        async with stdio(*flags(cache_dir, tmp_path / "runs")) as client:
            async with anyio.create_task_group() as group:
                async def hang() -> None:
                    await client.call_tool("evaluate", {"problem": SMALL, "path": "tests/candidates/hangs.py"},
                                           progress_callback=progress)

                group.start_soon(hang)
                with anyio.fail_after(120):
                    await checking.wait()
                group.cancel_scope.cancel()  # the client tells the server the call is cancelled
            started = time.monotonic()
            with anyio.fail_after(120):
                after = await client.call_tool("evaluate", {"problem": SMALL, "path": CORRECT})
            return after, time.monotonic() - started

    after, seconds = anyio.run(session)
    assert not after.is_error and after.structured_content["result"]["verdict"] == "correct", text(after)
    assert seconds < 120


@contextmanager
def http_server(cache_dir: Path, tmp_path: Path):
    """`harness mcp --http` with token `sesame`, once it answers: its URL, then its stderr in `said`."""
    import httpx2

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "HARNESS_MCP_TOKEN": "sesame"}
    server = subprocess.Popen([sys.executable, "-m", "harness", "mcp", "--http", "--port", str(port),
                               *flags(cache_dir, tmp_path / "runs")], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    said: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(url)
                break
            except httpx2.ConnectError:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1]
                time.sleep(0.2)
        yield url, said
    finally:
        server.terminate()
        said.append(server.communicate(timeout=60)[1])


def over_http(url: str, authorization: str, call: Callable):
    """call(client) in an MCP session over HTTP, every request carrying `authorization`."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def session():
        # the SDK's own client reads a streamed answer for up to 5 minutes, as here
        async with httpx2.AsyncClient(headers={"Authorization": authorization},
                                      timeout=httpx2.Timeout(30, read=300)) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            return await call(client)

    return anyio.run(session)


def test_over_http_a_request_without_the_token_is_refused(cache_dir, tmp_path):
    import httpx2

    with http_server(cache_dir, tmp_path) as (url, said):
        refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wrong = httpx2.post(url, json={}, headers={"Authorization": "Bearer open"})
        result = over_http(url, "Bearer sesame",
                           lambda client: client.call_tool("evaluate", {"problem": SMALL, "path": CPP}))
    assert refused.status_code == 401 and wrong.status_code == 401
    assert not result.is_error and result.structured_content["result"]["verdict"] == "correct", text(result)
    assert url in said[0] and "the token from $HARNESS_MCP_TOKEN" in said[0]
    assert "sesame" not in said[0]


def test_over_http_the_bearer_scheme_matches_in_any_case_and_the_token_only_exactly(cache_dir, tmp_path):
    import httpx2

    async def tools(client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    with http_server(cache_dir, tmp_path) as (url, _):
        for scheme in ("bearer", "BEARER", "bEaReR"):
            assert over_http(url, f"{scheme} sesame", tools) == TOOLS, scheme
        refused = {given: httpx2.post(url, json={}, headers={"Authorization": given}).status_code
                   for given in ("bearer open", "bearer Sesame", "bearer sesame2", "Basic sesame", "bearersesame")}
    assert refused == dict.fromkeys(refused, 401)


def test_the_option_schema_names_what_the_judge_takes():
    assert set(Options.__annotations__) == set(OPTIONS)


def test_timing_waits_for_builds_and_builds_for_timing_where_they_share_the_cores(cache_dir):
    """On the CPU a candidate is never timed beside a build: each waits for the other."""
    devices = Devices(EvalOptions(device="cpu", cache_dir=cache_dir))

    class Slot:  # an evaluator as the turns see it
        options = EvalOptions(device="cpu")

    events: list[str] = []
    job = Job(events.append)  # told where it waits
    with devices.building(job):
        timer = threading.Thread(target=lambda: _time(devices, Slot(), job, events))
        timer.start()
        time.sleep(0.5)
        events.append("build done")
    timer.join(10)
    later = Job(events.append)
    with devices.timing([Slot()], later):
        builder = threading.Thread(target=lambda: _build(devices, later, events))
        builder.start()
        time.sleep(0.5)
        events.append("timing done")
    builder.join(10)
    assert events == ["waiting for the builds in flight to end: they share the timing's cores", "build done", "timed",
                      "waiting to build: a candidate is being timed on these cores", "timing done", "built"]
    waiting = Job()
    waiting.cancel()
    with devices.timing([Slot()], Job()), pytest.raises(Cancelled):
        with devices.timing([Slot()], waiting):
            pass


def test_calls_at_once_take_the_free_gpu_of_their_pool(cache_dir):
    devices = Devices(EvalOptions(device="cuda", cache_dir=cache_dir))

    class Slot:
        def __init__(self, gpu: int):
            self.options = EvalOptions(device="cuda", gpu=gpu)

    pool = [Slot(0), Slot(1)]
    with devices.timing(pool, Job()) as first, devices.timing(pool, Job()) as second:
        assert (first, second) == (pool[0], pool[1])


def _time(devices: Devices, slot, job: Job, events: list[str]) -> None:
    with devices.timing([slot], job):
        events.append("timed")


def _build(devices: Devices, job: Job, events: list[str]) -> None:
    with devices.building(job):
        events.append("built")


@pytest.mark.gpu
def test_a_session_on_a_gpu_judges_the_shipped_kernel_and_its_run_renders(cache_dir, tmp_path):
    runs_dir = tmp_path / "runs"

    async def session():
        async with stdio("--cache-dir", str(cache_dir), "--runs-dir", str(runs_dir)) as client:
            described = await client.call_tool("describe_problem", {"problem": "problems/layernorm_4d.py"})
            started = await client.call_tool("start_run", {"problem": "problems/layernorm_4d.py"})
            judged = await client.call_tool("evaluate", {"problem": "problems/layernorm_4d.py",
                                                         "path": "kernels/layernorm_4d.py",
                                                         "run": started.structured_content["run"]})
            return described, started, judged

    described, started, judged = anyio.run(session)
    assert not described.is_error and "GPU time" in text(described) and "latency" in text(described)
    assert not judged.is_error and judged.structured_content["result"]["verdict"] == "correct", text(judged)
    assert judged.structured_content["result"]["speedup"] > 2 and "You can stop" in text(judged)
    run = started.structured_content["run"]
    assert cli("report", run, "--runs-dir", str(runs_dir))[0] == 0
    assert (runs_dir / run / "report.html").is_file()
