"""`harness mcp` through the SDK's own client: over stdio, as an agent's client starts it, and over
HTTP behind its token. CPU problems and candidates; the C++ build is shared with the other tests
through the session's cache."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import anyio
import pytest

mcp = pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from harness.agent.devices import Cancelled, Devices, Job  # noqa: E402
from harness.agent.judge import OPTIONS  # noqa: E402
from harness.agent.server import Options  # noqa: E402
from harness.engine.options import EvalOptions  # noqa: E402
from harness.engine.processes.ownership import running  # noqa: E402
from harness.runs.store import ANSWER_FILE, BUILD_LOG, CANDIDATE_FILE, EVAL_FILE, PROMPT_FILE, ROUND_FILE  # noqa: E402

from conftest import CANDIDATES, PROBLEMS, REPO  # noqa: E402
from test_history import cli  # noqa: E402

SMALL = str((PROBLEMS / "small_layernorm.py").relative_to(REPO))
CPP = str((CANDIDATES / "cpp_layernorm.py").relative_to(REPO))
WRONG = str((CANDIDATES / "py_wrong.py").relative_to(REPO))
CORRECT = str((CANDIDATES / "py_correct.py").relative_to(REPO))
TOOLS = {"describe_problem", "evaluate", "profile", "start_run", "history", "best", "show_round"}
# what only the loop's conversation has, never an agent's: its answer a ```python block, its best pinned in it
LOOP_ONLY = ("pinned above", "```python block")


def flags(cache_dir: Path, runs_dir: Path) -> list[str]:
    return ["--device", "cpu", "--time-cap", "0.5", "--trials", "2", "--cache-dir", str(cache_dir),
            "--runs-dir", str(runs_dir)]


def stdio(*options: str, env: Optional[dict[str, str]] = None) -> Client:
    """A client of `harness mcp OPTIONS` started over stdio in the repository, as an agent's client starts it,
    with `env` over this process's environment. Bytecode is written as Python writes it by default, so that
    a round directory holds what the harness leaves there."""
    args = ["-m", "harness", "mcp", *options]
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | (env or {})
    return Client(stdio_client(StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO),
                                                     env=environment)))


def text(result) -> str:
    return result.content[0].text


def one_sentence(result) -> str:
    """A refusal's text, which must be a tool error of one line, no traceback."""
    said = text(result)
    assert result.is_error and "\n" not in said.strip() and "Traceback" not in said, said
    return said


def children(pid: int) -> dict[int, str]:
    """Each child of `pid` with its state letter (/proc/PID/stat): "Z" for a zombie."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found[int(entry)] = fields[0]
    return found


def servers() -> list[int]:
    """The `harness mcp` processes this process started (over stdio, children of its own)."""
    found = []
    for pid in children(os.getpid()):
        try:
            if b"harness\0mcp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def server_pid() -> int:
    (pid,) = servers()
    return pid


class SeenChildren:
    """The command line of every child of the harness server seen alive, polled in a thread: a zombie has
    none left, so this is what names one in a failure's message."""

    def __init__(self):
        self.lines: dict[int, str] = {}
        self.done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self.done.wait(0.05):
            for server in servers():
                for pid in children(server):
                    try:
                        line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    except OSError:
                        continue
                    if line:
                        self.lines.setdefault(pid, line[:200])


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
            said["bogus"] = await client.call_tool("evaluate", {"problem": SMALL, "path": CPP,
                                                                "options": {"bogus": 1, "trials": 2}})
            said["zero"] = await client.call_tool("evaluate", {"problem": SMALL, "path": CPP, "options": {"trials": 0}})
            said["two"] = await client.call_tool("show_round", {"run": "latest", "round": "two"})
            return said

    said = anyio.run(session)
    tools = said["tools"]
    assert set(tools) == TOOLS
    assert all(tool.description and tool.input_schema["type"] == "object" for tool in tools.values())
    assert not [tool.name for tool in tools.values() if "\n " in tool.description]  # read as written, unindented
    assert {"problem", "source", "path", "run", "options"} <= set(tools["evaluate"].input_schema["properties"])
    # a CPU server speaks of C++ builds and the torch profiler, in its descriptions and its schemas
    told = [tool.description + json.dumps(tool.input_schema) for tool in tools.values()]
    assert not [line for line in told if "CUDA build" in line or "Nsight" in line or "ncu" in line]
    assert "a first C++ build" in tools["evaluate"].description

    described = said["describe"]
    assert not described.is_error
    assert "## Rules" in text(described) and "`x`: cpu float32 (8, 16, 32)" in text(described)
    assert "The reference alone, on each clock this device has: host time" in text(described)
    assert "send it to `evaluate`: its path (`path`) or its text (`source`)" in text(described)
    assert "```python block" not in text(described)
    assert described.structured_content["inputs"] == ["`x`: cpu float32 (8, 16, 32), contiguous"]
    assert set(described.structured_content["reference"]) == {"host"}

    correct = said["correct"]
    assert said["python"].structured_content["result"]["verdict"] == "correct", text(said["python"])
    assert not correct.is_error, text(correct)
    assert text(correct).startswith("## Verdict: correct\nThe candidate built")
    assert "## How it was timed" in text(correct)
    # no run: a verdict alone, no round, no table of rounds, no task done, nothing pinned
    for result in (correct, said["python"], said["wrong"]):
        assert not [phrase for phrase in ("Round", "the task is done", *LOOP_ONLY) if phrase in text(result)]
    assert correct.structured_content["result"]["verdict"] == "correct"
    assert "samples" not in correct.structured_content["result"]["timings"]["candidate"]
    assert {"building", "checking", "timing"} <= {phase for call, phase in phases if call == "correct"}
    # one candidate at a time past its build: the other's check never comes amid this one's
    on_device = [call for call, phase in phases if phase in ("checking", "timing", "checking other shapes")]
    assert on_device == sorted(on_device, key=on_device.index), phases

    profiled = said["profile"]  # on a CPU the torch profiler's ops, without a word of ncu
    assert not profiled.is_error and profiled.structured_content["profile"]["tool"] == "torch-cpu", text(profiled)
    assert text(profiled).startswith("Profile of one forward (torch profiler, CPU ops)") and "ncu" not in text(profiled)
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
    assert one_sentence(said["bogus"]) == ("Unknown evaluation option(s) bogus: `options` takes only "
                                           f"{', '.join(OPTIONS)}.")
    # what the schemas refuse, said as the judge's refusals are
    assert one_sentence(said["zero"]) == ("evaluate refused its arguments: `options.trials`: Input should be greater "
                                          "than or equal to 1 (given 0).")
    assert one_sentence(said["two"]).startswith("show_round refused its arguments: `round`: Input should be a valid "
                                                "integer")
    for refusal in ("syntax", "outside", "missing", "big", "unknown_run"):
        one_sentence(said[refusal])


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
                                                                   "options": {"trials": 3}}),
                    "bogus": await client.call_tool("evaluate", {"problem": SMALL, "path": CPP, "run": run,
                                                                 "options": {"bogus": 1}})}
            for n in (0, 3, -1):  # rounds the run does not have
                said[f"round {n}"] = await client.call_tool("show_round", {"run": run, "round": n})
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
    assert one_sentence(said["bogus"]).startswith("Unknown evaluation option(s) bogus: `options` takes only trials, ")
    for n in (0, 3, -1):
        assert one_sentence(said[f"round {n}"]) == f"Run {run} has rounds 1-2; round {n} does not exist."
    # an agent's run speaks of rounds, and of nothing pinned nor pasted
    assert text(first).startswith("## Round 1: incorrect") and "## Rounds so far" in text(first)
    assert not [phrase for phrase in LOOP_ONLY for told in (first, second, said["round"]) if phrase in text(told)]
    # a round directory holds the run's own files: the candidate was imported from it, without bytecode
    made = {PROMPT_FILE, ANSWER_FILE, CANDIDATE_FILE, EVAL_FILE, BUILD_LOG, ROUND_FILE}
    for round_dir in (runs_dir / run / "rounds").iterdir():
        assert {f.name for f in round_dir.iterdir()} <= made, sorted(round_dir.iterdir())

    # the server has ended: the run is settled and shows as `harness run`'s do
    rc, out = cli("show", run, "--runs-dir", str(runs_dir))
    assert rc == 0, out
    assert "proposer agent (mcp)" in out and "finished, stopped by target, outcome target" in out
    assert "incorrect" in out and "2 *" in out  # two rounds, the second the best
    rc, out = cli("report", run, "--runs-dir", str(runs_dir))
    assert rc == 0 and (runs_dir / run / "report.html").is_file(), out
    assert "agent (mcp)" in (runs_dir / run / "report.html").read_text()
    assert (runs_dir / run / "rounds" / "002" / "prompt.md").read_text().startswith("## Round 1: incorrect")


def test_a_run_stays_bound_to_its_problem_file_not_a_copy_of_it(cache_dir, tmp_path):
    """A copy of a run's problem (the same content at another path) is refused for the run, by the server that
    holds the run and by a later one that opens it again; the run's own file goes on being taken."""
    copy = tmp_path / "silu_copy.py"
    copy.write_text((PROBLEMS / "small_layernorm.py").read_text())
    options = (*flags(cache_dir, tmp_path / "runs"), "--root", str(REPO), "--root", str(tmp_path))

    async def session(run: str = "") -> dict:
        async with stdio(*options) as client:
            said = {}
            if not run:
                said["started"] = await client.call_tool("start_run", {"problem": SMALL})
                run = said["started"].structured_content["run"]
            said["copy"] = await client.call_tool("evaluate", {"problem": str(copy), "path": WRONG, "run": run})
            said["own"] = await client.call_tool("evaluate", {"problem": SMALL, "path": WRONG, "run": run})
            return said

    held = anyio.run(session)
    run = held["started"].structured_content["run"]
    reopened = anyio.run(session, run)
    original, copy = (PROBLEMS / "small_layernorm.py").resolve(), copy.resolve()
    for said in (held, reopened):
        assert one_sentence(said["copy"]) == (f"Run {run} is bound to problem file {original}, not {copy}: evaluate "
                                              "against the run's own problem file, or start_run for this one.")
    assert [said["own"].structured_content["round"] for said in (held, reopened)] == [1, 2], text(reopened["own"])
    record = json.loads((tmp_path / "runs" / run / "run.json").read_text())
    assert record["problem"]["path"] == str(original) and len(record["rounds"]) == 2


def test_a_cancelled_evaluation_ends_its_candidate_and_frees_the_device(cache_dir, tmp_path):
    """A candidate that never returns, cancelled while it is checked: its worker is ended at once, so the
    next call times on the device without waiting for the run timeout (600 s here). Whatever the server
    started, it reaps: after a call cancelled while it checks, one cancelled while it builds (its compiler
    killed), a log flood and a profile of a candidate that leaves daemons behind, none of its children is a
    zombie, and none of those daemons runs on."""
    daemons = tmp_path / "daemons.txt"  # where tests/candidates/forks_sessions.py lists the daemons it starts
    unbuilt = (CANDIDATES / "cpp_layernorm.py").read_text() + f"\n# {uuid.uuid4()}: a build of its own\n"
    seen = SeenChildren()

    async def session():
        async with stdio(*flags(cache_dir, tmp_path / "runs"), env={"DAEMON_PIDS": str(daemons)}) as client:
            async def cancelled(arguments: dict, phase: str) -> None:
                """The call cancelled by the client as soon as the server says it is at `phase`."""
                there = anyio.Event()

                async def progress(step: float, total, message) -> None:
                    if message == phase:
                        there.set()

                async with anyio.create_task_group() as group:
                    group.start_soon(lambda: client.call_tool("evaluate", {"problem": SMALL, **arguments},
                                                              progress_callback=progress))
                    with anyio.fail_after(120):
                        await there.wait()
                    group.cancel_scope.cancel()  # the client tells the server the call is cancelled

            await cancelled({"path": "tests/candidates/hangs.py"}, "checking")
            started = time.monotonic()
            with anyio.fail_after(120):
                after = await client.call_tool("evaluate", {"problem": SMALL, "path": CORRECT})
            seconds = time.monotonic() - started
            await cancelled({"source": unbuilt}, "building")
            with anyio.fail_after(300):
                flood = await client.call_tool("evaluate", {"problem": SMALL, "path": "tests/candidates/floods_log.py"})
                profiled = await client.call_tool("profile", {"problem": SMALL,
                                                              "path": "tests/candidates/forks_sessions.py"})
            server = server_pid()
            deadline = time.monotonic() + 60  # a child ended a moment ago may not be reaped yet
            while "Z" in children(server).values() and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            return after, seconds, flood, profiled, children(server)

    after, seconds, flood, profiled, left = anyio.run(session)
    assert not after.is_error and after.structured_content["result"]["verdict"] == "correct", text(after)
    assert seconds < 120
    assert flood.structured_content["result"]["verdict"] == "runtime_error", text(flood)
    assert not profiled.is_error and "Profile of one forward" in text(profiled), text(profiled)
    seen.done.set()
    zombies = [pid for pid, state in left.items() if state == "Z"]
    assert not zombies, {pid: seen.lines.get(pid, "never seen alive") for pid in zombies}
    started = [int(pid) for pid in daemons.read_text().split()]
    assert len(started) >= 5 and not [pid for pid in started if running(pid)]


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
