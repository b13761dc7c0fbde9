"""Which GPU a process takes when none is pinned: one no other harness process is timing on."""
import os
import signal
import subprocess
import sys

from harness.cli.config import take_free_gpu
from harness.engine.processes.device_lock import DeviceLock, device_key, held_devices, pick_gpu
from harness.engine.evaluate import EvalOptions

HOLD = ("import sys, time\nfrom harness.engine.processes.device_lock import DeviceLock\n"
        "lock = DeviceLock(sys.argv[1], sys.argv[2], print).__enter__()\nprint('held', flush=True)\ntime.sleep(600)\n")


def test_pick_gpu_takes_the_first_free_and_says_why():
    assert pick_gpu([0, 1], {}) == (0, None)
    assert pick_gpu([0, 1], {1: "7"}) == (0, None)  # the first is free: nothing to say
    assert pick_gpu([0, 1, 2], {0: "7", 1: "8"}) == (
        2, "GPU 0 is being timed by harness pid 7; GPU 1 is being timed by harness pid 8; using GPU 2.")
    assert pick_gpu([2, 3], {2: "7", 3: "8"}) == (
        2, "Every GPU is busy (GPU 2 is being timed by harness pid 7; GPU 3 is being timed by harness pid 8); "
           "waiting for GPU 2.")


def test_probe_sees_another_process_holding_a_gpu_and_not_a_dead_one(tmp_path):
    gpu0, gpu1 = device_key("cuda", 0), device_key("cuda", 1)
    assert held_devices(tmp_path, [gpu0, gpu1]) == {}  # never locked: no lock files at all
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), gpu0], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with DeviceLock(tmp_path, gpu1, print):
            pass  # GPU 1 was timed on and let go: its file remains, recording this pid
        assert held_devices(tmp_path, [gpu0, gpu1]) == {gpu0: str(holder.pid)}
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / "locks" / f"device-{gpu0}.lock").read_text() == str(holder.pid)
    assert held_devices(tmp_path, [gpu0, gpu1]) == {}  # its holder died, whatever the file says


def test_an_unpinned_evaluation_takes_a_gpu_no_one_is_timing_on(tmp_path, monkeypatch):
    # no GPU here: the machine's GPUs are said to be 0 and 1
    monkeypatch.setattr("harness.cli.config.visible_gpus", lambda: [0, 1])
    options, said = EvalOptions(device="cuda", cache_dir=tmp_path), []
    assert take_free_gpu(options, None, said.append).gpu == 0 and said == []
    with DeviceLock(tmp_path, device_key("cuda", 0), print):  # as another harness would, on GPU 0
        assert take_free_gpu(options, None, said.append).gpu == 1
        assert said == [f"GPU 0 is being timed by harness pid {os.getpid()}; using GPU 1."]
        assert take_free_gpu(options, [0], said.append) is options  # --gpus 0 (or a run's record) pins it
        for pinned in ("cuda:0", "cpu"):
            assert take_free_gpu(EvalOptions(device=pinned, cache_dir=tmp_path), None, said.append).gpu is None
        with DeviceLock(tmp_path, device_key("cuda", 1), print):
            assert take_free_gpu(options, None, said.append).gpu == 0
            assert said[-1].startswith("Every GPU is busy") and said[-1].endswith("waiting for GPU 0.")
    assert len(said) == 2


def test_an_evaluator_closes_only_while_no_timing_of_this_process_holds_its_device(cpu_options):
    """A problem's processes end (their memory and contexts freed) never beside a timing of the same
    process on the same device: a sweep closes a problem while the next one is checked and timed."""
    import threading

    from conftest import PROBLEMS
    from harness.engine.evaluate import Evaluator

    timing, closing = Evaluator(PROBLEMS / "small_layernorm.py", cpu_options), Evaluator(
        PROBLEMS / "small_layernorm.py", cpu_options)
    closed = threading.Event()
    try:
        with timing.children.untimed():  # as a timing holds it (Children.device_lock)
            threading.Thread(target=lambda: (closing.close(), closed.set()), daemon=True).start()
            assert not closed.wait(1.0)
        assert closed.wait(60)
    finally:
        timing.close()


def test_a_lock_not_waited_for_is_taken_only_where_no_one_holds_it(tmp_path):
    gpu0 = device_key("cuda", 0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), gpu0], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with DeviceLock(tmp_path, gpu0, owner=12345, wait=False) as lock:
            assert not lock.held and lock.waited_for is None
        assert held_devices(tmp_path, [gpu0]) == {gpu0: str(holder.pid)}  # its record left as it was
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with DeviceLock(tmp_path, gpu0, owner=12345, wait=False) as lock:
        assert lock.held and (tmp_path / "locks" / f"device-{gpu0}.lock").read_text() == "12345"
    assert held_devices(tmp_path, [gpu0]) == {}


def test_a_spare_makes_its_first_calls_holding_a_free_device_and_not_once_work_came(tmp_path):
    """workers/warm.py: the calls launch kernels, so never beside another's timing; a spare given work
    makes no more (its work goes first)."""
    import threading

    from harness.engine.workers.warm import when_free

    gpu0, seen = device_key("cuda", 0), []
    call = lambda: seen.append(held_devices(tmp_path, [gpu0]))  # noqa: E731 - who holds the device meanwhile
    work, idle = os.pipe(), os.pipe()
    try:
        os.write(work[1], b"x")  # work came: no calls, though the device is free
        assert when_free(work[0], [call], tmp_path, gpu0, owner=4242) is None and seen == []
        # work that comes after a step: the steps after it are not made
        late = lambda: os.write(idle[1], b"x")  # noqa: E731
        assert when_free(idle[0], [call, late, call], tmp_path, gpu0, owner=4242) >= 0 and len(seen) == 1
        os.read(idle[0], 1)
        seen.clear()
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), gpu0], stdout=subprocess.PIPE,
                                  text=True)
        assert holder.stdout.readline() == "held\n"
        took = []
        waiting = threading.Thread(target=lambda: took.append(when_free(idle[0], [call, call], tmp_path, gpu0,
                                                                        owner=4242)))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and seen == []  # held by another: no call, and it still waits
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        waiting.join(60)
        assert not waiting.is_alive() and took[0] is not None and took[0] >= 0
        assert seen == [{gpu0: "4242"}] * 2  # each step holding the device on its harness's behalf
        assert held_devices(tmp_path, [gpu0]) == {}  # and let go
        assert when_free(idle[0], [call], tmp_path, gpu0, owner=4242, give_up_s=0) is None  # gave up: none made
    finally:
        for fd in (*work, *idle):
            os.close(fd)


def test_a_spares_first_calls_run_on_the_cpu():
    import torch

    from harness.engine.workers.warm import first_calls

    for step in first_calls(torch.device("cpu")):  # each raises where a call does not fit what it calls
        step()


def test_a_spare_makes_no_first_call_while_a_measurement_waits(tmp_path):
    import fcntl

    from harness.engine.processes.device_lock import _want_path
    from harness.engine.workers.warm import when_free

    gpu0, seen = device_key("cuda", 0), []
    idle = os.pipe()
    try:
        (tmp_path / "locks").mkdir()
        with open(_want_path(tmp_path, gpu0), "a") as want:
            fcntl.flock(want, fcntl.LOCK_EX)  # as a measurement waiting for the device holds it
            assert when_free(idle[0], [lambda: seen.append(1)], tmp_path, gpu0, owner=4242, give_up_s=0.3) is None
            assert seen == [] and held_devices(tmp_path, [gpu0]) == {}  # the device was free all along
        assert when_free(idle[0], [lambda: seen.append(1)], tmp_path, gpu0, owner=4242) >= 0 and seen == [1]
    finally:
        for fd in idle:
            os.close(fd)
