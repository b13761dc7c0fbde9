"""The fork server's process (processes/forkserver.py is the harness's side):
`python -m harness.engine.workers.forks FD`. It imports torch and every role once, touches no device,
and on each request on FD (a role, an environment and a cwd, with the worker's channel and log as
file descriptors) forks a worker, answers with its pid, and reports every worker's exit status as
it reaps it.

It is the subreaper of what its workers start: a process a worker's candidate detached (a double fork,
a new session) and left behind when the worker ended comes here, and is ended at once. Such a process
carries the server's environment, not its worker's mark, so nothing else would find it."""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
ORPHAN_CHECK_S = 1.0  # how often the server looks for orphans that came without a worker's exit


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _worker(sock: socket.socket, wake: tuple[int, int], request: dict, fds: list[int]) -> None:
    """In the forked child: become the worker the request asks for; never returns."""
    try:
        gc.enable()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        os.setsid()
        channel_fd, log_fd = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random
        import tempfile

        import torch

        tempfile.tempdir = None  # TMPDIR is this worker's own scratch
        random.seed()
        torch.seed()
        from . import launch

        # as a fresh interpreter's: `python -m harness.engine.workers ROLE FD`
        sys.argv = [str(Path(launch.__file__).with_name("__main__.py")), request["role"], str(channel_fd)]
        launch.begin()
        # torch's threads as a fresh interpreter would count them: here OpenMP counted the server's
        # cores when torch was imported, and this worker may have been given fewer
        threads = os.environ.get("OMP_NUM_THREADS", "")
        torch.set_num_threads(int(threads) if threads.isdigit() else len(os.sched_getaffinity(0)))
        launch.main(sys.argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)


def _reap(sock: socket.socket, workers: set[int]) -> None:
    """Every child that ended reaped, a worker's exit reported; every other child (a worker's orphan) killed."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not pid:
            break
        if pid in workers:
            workers.discard(pid)
            _send(sock, {"exit": pid, "status": os.waitstatus_to_exitcode(status)})
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in workers:
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = f.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if parent == me:
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass


def serve(fd: int) -> None:
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a worker's orphans come here, to be ended
    sock = socket.socket(fileno=fd)
    harness = os.getppid()
    from ...integrity.guards import dispatch_tables
    from . import roles  # noqa: F401  torch and every role, imported once here

    dispatch_tables()  # taken once here, for every worker forked: before any candidate's code

    # what was imported is never collected: a worker's collections then pass it by, and its pages
    # stay shared with this process, not copied on first touch (gc.freeze's use, as Python's docs give it)
    gc.disable()
    gc.freeze()

    with open("/proc/self/maps") as f:
        if "libcuda.so" in f.read():  # the driver is loaded: a forked child could not use the device
            return  # (workers start the old way)
    wake = os.pipe()
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"ready": True})
    workers: set[int] = set()
    while True:
        readable = select.select([sock, wake[0]], [], [], ORPHAN_CHECK_S)[0]
        if os.getppid() != harness:
            return  # the harness is gone (PR_SET_PDEATHSIG would fire when the thread that started this one ends)
        if wake[0] in readable:
            os.read(wake[0], 4096)
        if sock in readable:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
            if not data:
                return  # the harness closed its end
            pid = os.fork()
            if pid == 0:
                _worker(sock, wake, json.loads(data), fds)
            for each in fds:
                os.close(each)
            workers.add(pid)
            _send(sock, {"pid": pid})
        _reap(sock, workers)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
