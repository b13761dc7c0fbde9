"""The harness owns every process it starts: none outlives an evaluation, a signal,
or (until the next start) the harness itself."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CANDIDATES, PROBLEMS, REPO
from harness.engine.evaluate import Evaluator
from harness.engine.processes.child import endings_done
from harness.engine.processes.ownership import _stat, marked, running
from harness.loop.feedback import Thresholds, feedback_text
from harness.loop.prompts import Prompts
from harness.results import Verdict

SMALL = PROBLEMS / "small_layernorm.py"


def start_eval(tmp_path, cache_dir, candidate="sleeps_in_forward.py"):
    """`harness eval` in a process of its own, and the file its candidate records its pids in."""
    pids = tmp_path / "pids.txt"
    env = {**os.environ, "FORWARD_PIDS": str(pids), "PYTHONPATH": str(REPO)}
    harness = subprocess.Popen(
        [sys.executable, "-m", "harness", "eval", str(SMALL), str(CANDIDATES / candidate), "--device", "cpu",
         "--run-timeout", "300", "--cache-dir", str(cache_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
    deadline = time.monotonic() + 240
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        assert harness.poll() is None and time.monotonic() < deadline, harness.communicate()[0]
        time.sleep(0.1)
    return harness, [int(p) for p in pids.read_text().split()]


def owned(harness_pid: int) -> set[int]:
    """Every process the harness started, by the mark they inherit."""
    return marked(f"{harness_pid}-")


def wait_gone(pids, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if running(p)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_candidate_leaves_no_process(tmp_path, cache_dir, signum):
    harness, candidate = start_eval(tmp_path, cache_dir)
    processes = owned(harness.pid)
    assert set(candidate) <= processes and len(processes) >= 3  # the reference process, the worker, its sleeper
    sent = time.monotonic()
    harness.send_signal(signum)
    left = wait_gone(processes, 5)
    print(f"{signal.Signals(signum).name}: no process left after {time.monotonic() - sent:.2f} s")
    assert not left, f"still running: {left}"
    output = harness.communicate(timeout=60)[0]
    assert harness.returncode == 128 + signum, output
    assert "Interrupted." in output and "Traceback" not in output


def test_daemons_in_new_sessions_are_gone_after_a_correct_verdict(cpu_options, tmp_path, monkeypatch):
    pids_file = tmp_path / "daemons.txt"
    monkeypatch.setenv("DAEMON_PIDS", str(pids_file))
    with Evaluator(SMALL, dataclasses.replace(cpu_options, run_timeout=60), keep_spare=False) as ev:
        result = ev.evaluate(CANDIDATES / "forks_sessions.py")
        assert result.verdict is Verdict.CORRECT, result.explanation
        daemons = [int(line) for line in pids_file.read_text().split()]
        assert len(daemons) == 5
        # the worker's tree is killed before the verdict returns, its teardown waited for behind it
        assert all(map(_dying, daemons)), [_stat(pid) for pid in daemons]
        endings_done()
        assert not [pid for pid in daemons if running(pid)]


def _dying(pid: int) -> bool:
    """Gone, a zombie, exiting (PF_EXITING) or with a SIGKILL pending: it runs no more of its own code."""
    fields = _stat(pid)
    if not fields or fields[0] in ("Z", "X") or int(fields[6]) & 0x4:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    pending = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGKILL - 1)) for mask in pending)


def test_what_a_killed_harness_left_is_ended_at_the_next_start(tmp_path):
    # a registry of its own: any harness start on a shared cache (another test process's) would end
    # what this killed harness left before the doctor below could
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_CACHE_DIR": str(cache_dir)}

    def harness_command(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *words], capture_output=True, text=True,
                              cwd=tmp_path, env=env)

    harness, candidate = start_eval(tmp_path, cache_dir)
    processes = owned(harness.pid)
    # a harness still alive: another start ends none of its processes
    doctor = harness_command("doctor", "--device", "cpu")
    assert "left running" not in doctor.stdout and all(running(p) for p in processes), doctor.stdout
    harness.kill()
    harness.wait()
    assert all(running(p) for p in candidate)  # orphans now, in sessions of their own
    # a listing ends nothing, even what a dead harness left
    listing = harness_command("runs", "--runs-dir", str(tmp_path / "runs"))
    assert listing.returncode == 0 and "left running" not in listing.stdout + listing.stderr, listing.stdout
    assert all(running(p) for p in candidate)
    doctor = harness_command("doctor", "--device", "cpu")
    assert f"left running by harness process(es) {harness.pid}" in doctor.stdout, doctor.stdout
    assert not wait_gone(processes, 2)


def test_host_memory_over_the_limit_is_a_verdict_that_names_it(tmp_path, cache_dir):
    out = tmp_path / "result.json"
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "harness", "eval", str(SMALL),
                             str(CANDIDATES / "host_out_of_memory.py"), "--device", "cpu", "--max-host-memory", "1G",
                             "--cache-dir", str(cache_dir), "--json", str(out)],
                            capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    print(f"host memory limit: verdict after {time.monotonic() - started:.1f} s")
    assert result.returncode == 1, result.stdout + result.stderr
    verdict = json.loads(out.read_text())
    assert verdict["verdict"] == "runtime_error"
    assert "host memory" in verdict["explanation"] and "over the limit of 1.00 GiB" in verdict["explanation"]


def test_a_log_flood_is_stopped_and_named(cpu_options):
    options = dataclasses.replace(cpu_options, max_log_bytes=1 << 20)
    with Evaluator(SMALL, options, keep_spare=False) as ev:
        result = ev.evaluate(CANDIDATES / "floods_log.py")
    assert result.verdict is Verdict.RUNTIME_ERROR, result.explanation
    assert "log flood" in result.explanation
    assert Path(result.worker_log).stat().st_size < 64 << 20
    # named as a flood where a model reads it, with advice about its output, not about shapes and bounds
    text = feedback_text(Prompts(), 1, result, Thresholds(), [], cpu=True)
    assert "The candidate flooded its log and was stopped." in text and "Remove the prints" in text
    assert "raised an error" not in text and "loop bounds" not in text


def test_too_many_processes_is_a_verdict_that_names_it(cpu_options, tmp_path, monkeypatch):
    pids_file = tmp_path / "pids.txt"
    monkeypatch.setenv("FORK_BOMB_PIDS", str(pids_file))
    with Evaluator(SMALL, dataclasses.replace(cpu_options, max_processes=10), keep_spare=False) as ev:
        result = ev.evaluate(CANDIDATES / "fork_bomb.py")
    assert result.verdict is Verdict.RUNTIME_ERROR, result.explanation
    assert "over the limit of 10 (--max-processes)" in result.explanation
    assert not wait_gone([int(p) for p in pids_file.read_text().split()], 2)


def test_a_round_of_the_kill_waits_until_its_processes_have_stopped(monkeypatch):
    """A process told to stop in the middle of a fork stops once the fork returns: the kill's next round
    looks for its child only then (a fork bomb's daemon outlived the kill when it looked sooner)."""
    from harness.engine.processes import ownership
    from harness.engine.processes.ownership import _until_stopped

    # A fork in flight cannot be made to last here: /proc says "running" twice (as it does until the
    # fork returns), then "stopped".
    states = iter(["R", "R", "T"])
    read: list[str] = []
    with monkeypatch.context() as patched:
        patched.setattr(ownership, "_stat", lambda pid: [read.append(next(states)) or read[-1]])
        _until_stopped({4242})
    assert read == ["R", "R", "T"]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        os.kill(busy.pid, signal.SIGSTOP)
        started = time.monotonic()
        _until_stopped({busy.pid})
        # back once it has stopped, or (on a machine too loaded to run it at all) once its bound has passed
        assert _stat(busy.pid)[0] in ("T", "t") or time.monotonic() - started >= ownership.STOP_WAIT_S
        _until_stopped({busy.pid, 1 << 30})  # stopped already, or no such process: back at once
    finally:
        busy.kill()
        busy.wait()


# In a process of its own, a subreaper as the harness is: a parent and its child killed together, reap's waits cut
# to nothing (as a teardown slower than them, under load, would), so that the child comes to this process only
# after reap has returned. (With LATE_REAP_S = 0 too, the child is left a zombie: "left".)
LATE_ORPHAN = """
import os, subprocess, sys, time
from harness.engine.processes import ownership
ownership.become_subreaper()
ownership.REAP_S = 0.0
ownership._wait_while = lambda *args: None
parent = subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork() == 0:\\n    time.sleep(600)\\n"
                           "time.sleep(600)"])
deadline = time.monotonic() + 60
while not ownership.descendants(parent.pid) and time.monotonic() < deadline:
    time.sleep(0.01)
(child,) = ownership.descendants(parent.pid)
ownership.reap(ownership.kill_processes({parent.pid}), spare=parent.pid)
parent.wait()
deadline = time.monotonic() + 30
while ownership._stat(child) and time.monotonic() < deadline:
    time.sleep(0.05)
print("left" if ownership._stat(child) else "gone", ownership._stat(child))
"""


def test_a_killed_process_that_comes_to_the_harness_after_the_reap_is_reaped_all_the_same():
    """A killed parent torn down late (under load) hands its killed child, now a zombie, to the harness, its
    subreaper, after reap stopped waiting: a thread reaps it as it comes, so a long-lived harness (harness mcp)
    collects no zombies."""
    done = subprocess.run([sys.executable, "-c", LATE_ORPHAN], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.startswith("gone"), done.stdout + done.stderr


def test_old_logs_are_removed_by_age_and_size(tmp_path):
    from harness.engine.processes.child import LOG_KEEP_BYTES, prune_logs

    day = 24 * 3600
    now = time.time()
    logs = {name: tmp_path / f"{name}.log" for name in ("old", "big_old", "big_new", "small")}
    for name, size, age in (("old", 10, 8 * day), ("big_old", LOG_KEEP_BYTES, 2 * day),
                            ("big_new", LOG_KEEP_BYTES // 2, 2 * 3600), ("small", 10, 60)):
        with open(logs[name], "wb") as f:
            f.truncate(size)
        os.utime(logs[name], (now - age, now - age))
    prune_logs(tmp_path)
    assert sorted(p.stem for p in tmp_path.iterdir()) == ["big_new", "small"]


def hold_the_cpu(cpu_options, owner=None) -> subprocess.Popen:
    """Another harness process, holding the "cpu" device until its stdin closes; with `owner`, a process
    holding it on that harness process's behalf (a sweep's next problem's reference, loading)."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from harness.engine.processes.device_lock import DeviceLock; "
         f"lock = DeviceLock({str(cpu_options.cache_dir)!r}, 'cpu', print, owner={owner}).__enter__(); "
         "print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("ours", [False, True])
def test_a_second_harness_waits_for_the_device_and_says_so(cpu_options, tmp_path, ours):
    """The lock key is the device: two evaluations on the CPU contend for "cpu". A process holding it
    for this harness (`ours`: a sweep's next problem's reference, loading while this problem's later
    candidates are timed) is waited for as well, and is no other harness process to warn of."""
    # a device lock of its own: another test process (pytest-xdist) times on this machine's CPU too
    cpu_options = dataclasses.replace(cpu_options, cache_dir=tmp_path / "cache")
    import threading

    phases, waiting = [], threading.Event()

    def on_phase(phase: str) -> None:
        phases.append(phase)
        waiting.set() if phase.startswith("waiting for") else None

    holder = hold_the_cpu(cpu_options, os.getpid() if ours else None)
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        outcome = []
        evaluation = threading.Thread(target=lambda: outcome.append(ev.evaluate(CANDIDATES / "py_correct.py",
                                                                                on_phase)), daemon=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            evaluation.start()
            assert waiting.wait(240), phases
            time.sleep(0.5)
            assert phases[-1] == f"waiting for cpu, held by pid {os.getpid() if ours else holder.pid}"  # nothing timed
        finally:
            holder.stdin.close()
            holder.wait(60)
        evaluation.join(240)
    result = outcome[0]
    assert result.verdict is Verdict.CORRECT, result.explanation
    assert len([p for p in phases if p.startswith("waiting")]) == 1
    assert any("waited for another harness process" in w for w in result.warnings) is not ours
    # the wait in its record's ledger, apart from the gate's: at least the half second the lock was held after it
    from harness.engine.children import DEVICE_WAITS

    assert result.details["waits_s"][DEVICE_WAITS[1]] >= 0.5 and DEVICE_WAITS[0] in result.details["waits_s"]


def test_a_prepared_reference_loads_only_while_no_one_times_on_the_device(cpu_options, tmp_path):
    """A sweep loads the next problem's reference beside the current one: never beside its timing."""
    # a device lock of its own: another test process (pytest-xdist) times on this machine's CPU too
    cpu_options = dataclasses.replace(cpu_options, cache_dir=tmp_path / "cache")
    import threading

    holder = hold_the_cpu(cpu_options)
    with Evaluator(SMALL, cpu_options, keep_spare=False) as ev:
        preparing = threading.Thread(target=ev.prepare, daemon=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            preparing.start()
            time.sleep(8)  # long enough for the reference to load, were it not waiting
            assert preparing.is_alive() and not ev.reference_info.ready
        finally:
            holder.stdin.close()
            holder.wait(60)
        preparing.join(120)
        assert ev.reference_info.ready
        # the reference process waited itself, its imports done, and took the device when it was let go,
        # for this harness: its lock file names this process, so a wait for it is a wait for this harness
        lock = cpu_options.cache_dir / "locks" / "device-cpu.lock"
        assert lock.read_text().strip() == str(os.getpid())


def test_a_teardown_begun_while_another_thread_waits_for_endings_is_waited_for(tmp_path, monkeypatch):
    """kill(wait=False) lists its teardown's thread; endings_done() in another thread at that instant (a
    batch's other lane closing its problem) waits for it, and never meets it listed but not started
    (that raised "cannot join thread before it is started" and ended a whole batch)."""
    import threading

    from harness.engine.processes import child as module

    original, raised, others = threading.Thread, [], []

    def ends() -> None:
        try:
            endings_done()
        except RuntimeError as exc:
            raised.append(exc)

    class Racing(original):
        def start(self) -> None:
            if self.name == "ending":  # another thread asks for the endings just before this one starts
                others.append(original(target=ends, daemon=True))
                others[-1].start()
                others[-1].join(0.5)
            super().start()

    worker = module.Child("candidate", tmp_path / "worker.log", forked=True)
    monkeypatch.setattr(module.threading, "Thread", Racing)
    worker.kill(wait=False)
    monkeypatch.setattr(module.threading, "Thread", original)
    for other in others:
        other.join(60)
    assert len(others) == 1 and not others[0].is_alive() and raised == []
    assert not worker.alive()
