"""Workers forked from the fork server (engine/processes/forkserver.py): what a fresh interpreter
would be, each with random state of its own, ended and reported as before, and started the old way
where the server is off or gone."""
import json
import os
import signal
import socket
import subprocess
import threading
import time

from conftest import CANDIDATES, PROBLEMS

from harness.engine.evaluate import Evaluator
from harness.engine.processes import forkserver
from harness.results import Verdict

SMALL = PROBLEMS / "small_layernorm.py"

# a correct candidate that writes, as it is imported, its process's random state and cwd
SEEDS = '''import os, random
import torch
with open(os.environ["SEED_LOG"], "a") as f:
    f.write(f"{os.getpid()} {torch.initial_seed()} {random.random()} {os.getcwd()} {os.getsid(0) == os.getpid()}\\n")
''' + (CANDIDATES / "py_correct.py").read_text()


def test_workers_are_forked_each_with_random_state_and_a_session_of_its_own(cpu_options, tmp_path, monkeypatch):
    candidate = tmp_path / "seeds.py"
    candidate.write_text(SEEDS)
    monkeypatch.setenv("SEED_LOG", str(tmp_path / "seeds.log"))
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        first = ev.evaluate(candidate)
        assert isinstance(ev.reference.proc, forkserver.Forked)
        second = ev.evaluate(candidate)
    assert first.verdict == second.verdict == Verdict.CORRECT, (first.explanation, second.explanation)
    lines = [line.split() for line in (tmp_path / "seeds.log").read_text().splitlines()]
    pids = {line[0] for line in lines}
    assert len(pids) >= 2  # a worker per candidate (and the trials' imports in each)
    by_pid = {line[0]: line for line in lines}
    assert len({line[1] for line in by_pid.values()}) == len(by_pid)  # torch's seed: each its own
    assert len({line[2] for line in by_pid.values()}) == len(by_pid)  # Python's random: each its own
    assert all(line[4] == "True" for line in lines)  # a session leader, as start_new_session made it
    assert all("/harness-" in line[3] for line in lines)  # in its own scratch directory


def test_a_crash_is_reported_as_a_fresh_interpreters_was(cpu_options):
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        result = ev.evaluate(CANDIDATES / "segfault.py")
    assert result.verdict == Verdict.CRASHED and "SIGSEGV" in result.explanation


def test_with_the_server_off_or_killed_workers_start_the_old_way(cpu_options, monkeypatch):
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        assert ev.evaluate(CANDIDATES / "py_correct.py").verdict == Verdict.CORRECT
        server = forkserver._server
        assert server is not None and server.alive()
        os.kill(server.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        # the reference forked before the server died is still answered for, and the next candidate runs
        assert ev.reference.alive()
        assert ev.evaluate(CANDIDATES / "py_correct.py").verdict == Verdict.CORRECT
    assert forkserver._server is not server and forkserver._server.alive()  # a new server started
    monkeypatch.setenv(forkserver.SWITCH, "0")
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        assert ev.evaluate(CANDIDATES / "py_correct.py").verdict == Verdict.CORRECT
        assert isinstance(ev.reference.proc, subprocess.Popen)


def test_a_server_started_by_a_thread_that_ends_lives_on_and_one_killed_is_reaped(tmp_path, monkeypatch):
    """`harness mcp` evaluates in threads that end: the server one of them started stays up (it once died with that
    thread, PR_SET_PDEATHSIG, and stayed a zombie); a server killed is reaped within seconds, though no server()
    call comes after."""
    from harness.engine.processes.ownership import _stat

    monkeypatch.setattr(forkserver, "_server", None)
    started = []
    thread = threading.Thread(target=lambda: started.append(forkserver.server(
        {**os.environ}, tmp_path / "registry", tmp_path / "forkserver.log")))
    thread.start()
    thread.join()
    (server,) = started
    try:
        time.sleep(1.5)  # the thread that started it is gone
        assert server is not None and server.alive()
        os.kill(server.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _stat(server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stat(server.proc.pid) is None  # reaped, not a zombie
    finally:
        server.kill()


def test_only_a_cpu_evaluations_workers_are_forked(cpu_options):
    from harness.engine.evaluate import EvalOptions

    assert cpu_options.forked()
    assert not EvalOptions(device="cuda").forked()  # fresh interpreters there (EvalOptions.forked says why)


def test_a_reused_pid_is_not_given_the_exit_of_the_worker_that_had_it():
    """The server reaps a worker and reports its exit; the kernel may give its pid to the next worker
    it forks (pid_max is 32768 in many containers). The old exit is not the new worker's."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server = object.__new__(forkserver.Server)  # the harness's end alone, over a real socket
    server.sock, server.replies, server.statuses = ours, [], {}
    server.exited, server.ready = threading.Condition(), True
    server.proc = subprocess.Popen(["sleep", "30"])  # the server process, alive
    try:
        threading.Thread(target=server._read, daemon=True).start()
        for message in ({"exit": 4242, "status": 1}, {"pid": 4242}):  # an old worker's end, then a new one
            theirs.send(json.dumps(message).encode())
        assert server._next_reply(time.monotonic() + 10) == {"pid": 4242}
        worker = forkserver.Forked(server, 4242)
        assert worker.poll() is None  # running, not the old worker's status 1
        theirs.send(json.dumps({"exit": 4242, "status": 0}).encode())
        assert worker.wait(timeout=10) == 0
    finally:
        server.proc.kill()
        theirs.close()
