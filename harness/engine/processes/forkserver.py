"""Workers forked from a server that has imported torch once.

Importing torch costs a worker 2-3 s of CPU. A harness process that starts many workers on a CPU
(a sweep, a loop, a test suite; EvalOptions.forked says where) starts one fork server instead: a
process of its own (never the harness's: it runs no candidate code, and the harness's threads must
not be forked) that imports torch and the worker roles, touches no device, and forks a worker per
request. The worker, forked, becomes what `python -m harness.engine.workers ROLE FD` would have
been: its own session, the environment, cwd, log and channel the harness gives it, fresh random
state (a worker forked from the same server would otherwise draw what another draws), then
launch.begin() and launch.main() as a fresh interpreter runs them. The server reaps its children
and reports each exit status, so the harness holds a handle (Forked) that answers as
subprocess.Popen does.

The server's own side is workers/forks.py. Where the server cannot start or has died, workers
start as fresh interpreters, as they did before; HARNESS_FORKSERVER=0 asks for that always. The
server ends with the harness (its end of the socket closed, or its parent gone: not PR_SET_PDEATHSIG, which
fires when the thread that started it ends, as a `harness mcp` thread does), and carries the harness's mark
(ownership.py): what a killed harness leaves is found as before.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from .ownership import disown, running, spawn

SWITCH = "HARNESS_FORKSERVER"  # "0": every worker in a fresh interpreter
START_S = 120.0  # for the server's imports, on a loaded host


class Forked:
    """A worker forked by the server: what Child uses of subprocess.Popen (pid, returncode, poll, wait)."""

    def __init__(self, server: "Server", pid: int):
        self.server, self.pid = server, pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.server.exit_status(self.pid)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            with self.server.exited:
                self.server.exited.wait(0.01)
        return self.returncode


class Server:
    """The harness's end: asks for workers, keeps their exit statuses as the server reports them."""

    def __init__(self, env: dict, registry, log_path):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        command = [sys.executable, "-m", "harness.engine.workers.forks", str(theirs.fileno())]
        try:
            with open(log_path, "ab") as log:
                self.proc, _ = spawn(self, env, registry, lambda marked: subprocess.Popen(
                    command, env=marked, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True))
        finally:
            theirs.close()
        self.lock = threading.Lock()  # one request at a time: replies come in order
        self.replies: list[dict] = []
        self.statuses: dict[int, int] = {}
        self.exited = threading.Condition()
        self.ready = True  # until the server's hello says otherwise, or its end closes
        threading.Thread(target=self._read, daemon=True, name="forkserver").start()
        threading.Thread(target=self._reap_when_gone, daemon=True, name="forkserver-reaper").start()
        hello = self._next_reply(time.monotonic() + START_S)
        self.ready = bool(hello and hello.get("ready"))

    def _reap_when_gone(self) -> None:
        """However the server ends (killed for a request it left unanswered, by the kernel, or on its own), it is
        reaped within a second, not left a zombie until the next server() (there may be none)."""
        while self.proc.poll() is None:
            time.sleep(1.0)

    def _next_reply(self, deadline: float) -> Optional[dict]:
        with self.exited:
            while not self.replies and self.alive() and time.monotonic() < deadline:
                self.exited.wait(0.05)
            return self.replies.pop(0) if self.replies else None

    def _read(self) -> None:
        """Every message from the server: replies in order, exit statuses by pid."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            message = json.loads(data) if data else None
            with self.exited:
                if message is None:
                    self.ready = False
                    self.exited.notify_all()
                    return
                if "exit" in message:
                    self.statuses[message["exit"]] = message["status"]
                else:
                    # A new worker's pid may be an old one's, reused: its exit, reported before this
                    # reply, is not the new worker's (taken for it, an honest candidate read as crashed).
                    self.statuses.pop(message.get("pid"), None)
                    self.replies.append(message)
                self.exited.notify_all()

    def alive(self) -> bool:
        return self.ready and self.proc.poll() is None

    def fork(self, role: str, channel_fd: int, env: dict, log_fd: int, cwd: str) -> Optional[Forked]:
        """A worker for `role`, or None where the server could not make one (start it the old way)."""
        request = json.dumps({"role": role, "env": env, "cwd": cwd}).encode()
        with self.lock:
            if not self.alive():
                return None
            try:
                socket.send_fds(self.sock, [request], [channel_fd, log_fd])
            except OSError:
                return None
            reply = self._next_reply(time.monotonic() + 30.0)
            if not (reply and reply.get("pid")):
                # unanswered, it may still fork this worker: a server not to ask again (replaced, and
                # disowned, by the next server(); this runs under ownership's lock, kill() takes it)
                self.ready = False
                self.proc.kill()
                return None
        return Forked(self, reply["pid"])

    def exit_status(self, pid: int) -> Optional[int]:
        """The worker's exit code (negative: the signal), or None while it runs."""
        with self.exited:
            if pid in self.statuses:
                return self.statuses.pop(pid)
        if self.alive():
            return None
        # The server is gone: its workers are this process's now (a subreaper), or gone unreported.
        try:
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                return os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            pass
        return -signal.SIGKILL if not running(pid) else None

    def kill(self) -> None:
        """The server only; the workers it forked are their Childs' to end."""
        self.ready = False
        try:
            self.proc.kill()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.sock.close()
        disown(self)


_server: Optional[Server] = None
_server_lock = threading.Lock()


def server(env: dict, registry, log_path) -> Optional[Server]:
    """This harness process's fork server, started at the first call (and again if it died) with
    `env`, listed in `registry`, writing to `log_path`; None where it is switched off or cannot start."""
    global _server
    if os.environ.get(SWITCH, "1") == "0":
        return None
    with _server_lock:
        if _server is None or not _server.alive():
            if _server is not None:
                _server.kill()
            _server = Server(env, registry, log_path)
            if not _server.ready:
                _server.kill()
        return _server if _server.ready else None
