"""Child processes as seen from the harness: start, talk, time-limit, kill.

Every child runs `python -m harness.engine.workers ROLE FD` in a session of its own, so
killing its process group also ends whatever it started (ninja, nvcc, a fork
bomb). Its stdout and stderr go to a log file; results come back only over the
private channel on FD.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from . import channel


class ChildDied(Exception):
    """The child ended without answering; `status` says how."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


class ChildTimeout(Exception):
    """The child did not answer in time and was killed."""


def describe_exit(returncode: Optional[int]) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = {"SIGSEGV": " (segmentation fault)", "SIGKILL": " (killed, often out of memory)",
                   "SIGABRT": " (aborted)", "SIGBUS": " (bus error)", "SIGFPE": " (arithmetic fault)",
                   "SIGILL": " (illegal instruction)", "SIGXFSZ": " (wrote a file over the size limit)",
                   "SIGXCPU": " (CPU time limit)"}.get(name, "")
        return f"was killed by {name}{meaning}"
    return f"exited with status {returncode} before reporting a result"


def _pythonpath() -> str:
    """Children import this very harness package, wherever it was imported from."""
    root = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{rest}" if rest else root


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                table[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(root: int) -> set[int]:
    parents = _parents()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def signal_tree(root: int, signum: int) -> None:
    for pid in descendants(root) | {root}:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(root: int) -> None:
    """Stop every process under `root`, then kill them all.

    Workers are child subreapers, so nothing they start escapes their subtree
    by daemonizing or changing session; stopping first keeps a fork bomb from
    outrunning the kill."""
    stopped: set[int] = set()
    for _ in range(50):
        fresh = (descendants(root) | {root}) - stopped
        if not fresh:
            break
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        stopped |= fresh
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    # SIGKILL lands asynchronously; wait (briefly) until the tree is really gone
    deadline = time.monotonic() + 2.0
    while any(running(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.01)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Child:
    """One worker process and the parent's end of its channel."""

    def __init__(self, role: str, log_path: Path, env: Optional[dict] = None):
        self.role = role
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # a private scratch directory: what a candidate writes there goes with it
        self.scratch = tempfile.mkdtemp(prefix=f"harness-{role}-")
        self.conn, child_fd = channel.pair()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "harness.engine.workers", role, str(child_fd)],
                pass_fds=(child_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.scratch,
                env={**os.environ, "PYTHONPATH": _pythonpath(), "TMPDIR": self.scratch, **(env or {})})
        os.close(child_fd)

    def send(self, header: dict, tensors: list = ()) -> None:
        try:
            channel.send(self.conn, header, tensors)
        except OSError:
            raise ChildDied(self._exit_status()) from None

    def forward(self, message: channel.Message, **extra) -> None:
        """Pass on a message received raw from another child."""
        try:
            channel.forward(self.conn, message, **extra)
        except OSError:
            raise ChildDied(self._exit_status()) from None

    def _wait_readable(self, deadline: float) -> None:
        self.waited = 0.0
        started = time.monotonic()
        while not self.conn.poll(0.05):
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise ChildDied(describe_exit(self.proc.returncode))
            if time.monotonic() > deadline:
                self.waited = time.monotonic() - started
                self.kill()
                raise ChildTimeout()

    def recv(self, deadline: float, raw: bool = False) -> channel.Message:
        """The next message, decoded (or raw for relaying), before `deadline` (monotonic)."""
        self._wait_readable(deadline)
        try:
            return channel.recv_raw(self.conn) if raw else channel.recv(self.conn)
        except (EOFError, OSError):
            raise ChildDied(self._exit_status()) from None

    def _exit_status(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        return describe_exit(self.proc.returncode)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """Stop the whole tree (SIGSTOP): it takes no CPU and submits no GPU work until resumed."""
        if self.alive():
            signal_tree(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            signal_tree(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def stop(self) -> None:
        """Ask politely, then kill: children never outlive the harness's use of them."""
        if self.alive():
            try:
                channel.send(self.conn, {"cmd": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
