"""One child process as seen from the harness: start it, talk to it, time-limit it, watch it, kill it.

Every child runs as `python -m harness.engine.workers ROLE FD` would, in a session of its own, owned
by the harness (ownership.py): forked from the fork server where asked and it runs (forkserver.py),
which saves each child torch's import, else that very command. Its stdout and stderr go to a log
file; results come back only over the private channel on FD. A child that runs candidate code is
watched against its Limits.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import channel, forkserver
from .ownership import (continue_all, descendants, disown, end_processes, kill_processes, pythonpath, reap,
                        spawn, stop_tree)


class ChildDied(Exception):
    """The child ended without answering; `status` says how."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


class ChildTimeout(Exception):
    """The child did not answer in time and was killed."""


class ChildBrokeProtocol(Exception):
    """The child sent something that is not a message of the channel's protocol."""


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



@dataclass
class Limits:
    """What a child that runs candidate code may use; the watchdog kills its tree past any."""

    host_memory: int  # bytes of resident memory (proportional set size) of the whole tree
    processes: int
    log_bytes: int  # growth of its log file


WATCH_INTERVAL = 0.1
MAX_PROCESSES = 256
MAX_LOG_BYTES = 64 << 20


def default_host_memory() -> int:
    """Half the machine's memory, and at least 4 GiB left for the rest of the host."""
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    return max(min(total // 2, total - (4 << 30)), 1 << 30)


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _resident(pid: int) -> int:
    """Resident set size in bytes (cheap; counts pages shared by a fork in each process)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _proportional(pid: int) -> int:
    """Proportional set size in bytes: shared pages split among their sharers, so a
    fork of a big process is not counted twice (about 20 ms for a process with torch)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


# glibc's heap, the same in every child: its default moves the size above which an allocation is a fresh
# mapping (page faults, zeroed by the kernel, inside a timed call) with each process's history, so the
# candidate's process and the reference's, taking turns, timed the same 16 MB LayerNorm at 8.4 ms and
# 1.8 ms. Fixed (at glibc's largest), with freed memory kept, both read 1.6 ms and a copy 1.00x.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


class Child:
    """One worker process and the parent's end of its channel."""

    def __init__(self, role: str, log_path: Path, env: Optional[dict] = None, limits: Optional[Limits] = None,
                 registry: Optional[Path] = None, forked: bool = False):
        self.role = role
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.breach = ""  # the limit the watchdog stopped it for, in a sentence
        self.over = ""  # ...and by name: "host_memory", "processes" or "log" (the feedback's advice)
        self._paused: set[int] = set()  # what pause stopped, for resume
        self.peak_memory = 0
        # before the child is listed live: end_all() may kill it from another thread at once
        self._stop_watch = threading.Event()
        # a private scratch directory: what a candidate writes there goes with it
        self.scratch = tempfile.mkdtemp(prefix=f"harness-{role}-")
        self.conn, child_fd = channel.pair()
        base = {**MALLOC_ENV, **os.environ, "PYTHONPATH": pythonpath()}
        # `forked`: from the server where it runs (no torch import of its own), else a fresh interpreter
        server = forked and forkserver.server(base, registry, self.log_path.parent / "forkserver.log")

        def start(marked: dict):
            return (server and server.fork(role, child_fd, marked, log.fileno(), self.scratch)) or subprocess.Popen(
                [sys.executable, "-m", "harness.engine.workers", role, str(child_fd)], env=marked,
                pass_fds=(child_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=self.scratch)

        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self.proc, self.mark = spawn(self, {**base, "TMPDIR": self.scratch, **(env or {})}, registry, start)
        os.close(child_fd)
        if limits:
            threading.Thread(target=self._watch, daemon=True, name=f"watch-{role}").start()

    def _watch(self) -> None:
        """Every WATCH_INTERVAL: the tree's memory, its number of processes and the log's growth."""
        limits = self.limits
        while not self._stop_watch.wait(WATCH_INTERVAL) and self.proc.poll() is None:
            tree = descendants(self.proc.pid) | {self.proc.pid}
            memory = sum(_resident(pid) for pid in tree)
            if memory > limits.host_memory:  # the exact figure only when the cheap one is over
                memory = sum(_proportional(pid) for pid in tree)
            self.peak_memory = max(self.peak_memory, memory)
            try:
                logged = os.path.getsize(self.log_path) - self._log_start
            except OSError:
                logged = 0
            if memory > limits.host_memory:
                self.over = "host_memory"
                self.breach = (f"its processes held {gib(memory)} of host memory, over the limit of "
                               f"{gib(limits.host_memory)} (--max-host-memory)")
            elif len(tree) > limits.processes:
                self.over = "processes"
                self.breach = f"it ran {len(tree)} processes, over the limit of {limits.processes} (--max-processes)"
            elif logged > limits.log_bytes:
                self.over = "log"
                self.breach = (f"it wrote {gib(logged)} to its log, over the limit of {gib(limits.log_bytes)} "
                               "(a log flood)")
            if self.breach:
                end_processes({self.proc.pid}, self.mark + "\0", spare=self.proc.pid)
                return

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
        while not self.conn.poll(0.05):
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise ChildDied(describe_exit(self.proc.returncode))
            if time.monotonic() > deadline:
                self.kill()
                raise ChildTimeout()

    def recv(self, deadline: float, raw: bool = False) -> channel.Message:
        """The next message, decoded (or raw for relaying), before `deadline` (monotonic).

        A message that breaks the protocol (malformed, oversized, or cut short and not
        finished by the deadline) raises ChildBrokeProtocol."""
        self._wait_readable(deadline)
        # a message begun must also be finished by the deadline
        self.conn.sock.settimeout(max(0.5, deadline - time.monotonic()))
        try:
            return channel.recv_raw(self.conn) if raw else channel.recv(self.conn)
        except channel.ChannelError as exc:
            try:  # cut short because the watchdog killed it, or it died mid-message, is no forgery
                self.proc.wait(timeout=0.2)
                raise ChildDied(describe_exit(self.proc.returncode)) from None
            except subprocess.TimeoutExpired:
                if self.breach:
                    raise ChildDied("was killed") from None
                raise ChildBrokeProtocol(str(exc)) from None
        except TimeoutError:
            raise ChildBrokeProtocol("a message was begun but not finished in time") from None
        except (EOFError, OSError):
            raise ChildDied(self._exit_status()) from None
        finally:
            self.conn.sock.settimeout(None)

    def _exit_status(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        return describe_exit(self.proc.returncode)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pause(self) -> None:
        """Stop the whole tree (SIGSTOP), and wait until it is: it takes no CPU and submits no GPU work
        until resumed. The tree is its descendants and whatever carries its mark, in whatever session."""
        if self.alive():
            self._paused = stop_tree(self.proc.pid, self.mark + "\0")

    def resume(self) -> None:
        """Every process pause stopped continued (none can have started since)."""
        continue_all(self._paused)
        self._paused = set()

    def kill(self, wait: bool = True) -> None:
        """End the child and everything it started, in whatever session, alive or orphaned. Without
        `wait`, none of them runs on once this returns, but their teardown (0.1-0.2 s for a GPU
        context) is waited for in the background: endings_done() waits for it."""
        self._stop_watch.set()
        killed = kill_processes({self.proc.pid} if self.proc.poll() is None else set(), self.mark + "\0")
        if wait:
            self._gone(killed)
            return
        ending = threading.Thread(target=self._gone, args=(killed,), daemon=True, name="ending")
        with _ENDING_LOCK:  # listed and started at once: endings_done() in another thread joins only started ones
            _ENDING.add(ending)
            ending.start()

    def _gone(self, killed: set[int]) -> None:
        try:
            reap(killed, spare=self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # torn down slowly (under load): reaped when it is gone, not left a zombie
                threading.Thread(target=self.proc.wait, name="child-reap", daemon=True).start()
            self.conn.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            disown(self)
        finally:
            with _ENDING_LOCK:
                _ENDING.discard(threading.current_thread())

    def end(self) -> None:
        """End its processes from another thread: the thread talking to it reads the death as any other
        (ChildDied) and closes the channel, which stays its own."""
        end_processes({self.proc.pid} if self.alive() else set(), self.mark + "\0", spare=self.proc.pid)

    def stop(self, wait: bool = True) -> None:
        """Done with the child. The reference process, which runs no candidate code, is asked to exit
        first; a child that ran candidate code is killed at once, with its tree still whole (`wait`: kill)."""
        if self.alive() and self.role == "reference":
            try:
                channel.send(self.conn, {"cmd": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill(wait)


# children killed without waiting (Child.kill), their teardown not yet over
_ENDING: set[threading.Thread] = set()
_ENDING_LOCK = threading.Lock()


def endings_done() -> None:
    """Until every child killed without waiting is gone: a timing must not run beside a teardown (the
    kernel freeing a process's memory, the driver its GPU context), nor an evaluation end before it."""
    with _ENDING_LOCK:
        pending = list(_ENDING)
    for ending in pending:
        ending.join()


LOG_KEEP_BYTES = 200 << 20
LOG_KEEP_SECONDS = 7 * 24 * 3600
LOG_IN_USE_SECONDS = 3600  # a log written this recently may belong to a running harness


def prune_logs(directory: Path) -> None:
    """Remove worker logs older than a week, then the oldest until the rest fit in LOG_KEEP_BYTES."""
    try:
        logs = sorted(((f.stat().st_mtime, f.stat().st_size, f) for f in Path(directory).glob("*.log")),
                      reverse=True)
    except OSError:
        return
    now, kept = time.time(), 0
    for mtime, size, path in logs:
        kept += size
        if now - mtime > LOG_KEEP_SECONDS or (kept > LOG_KEEP_BYTES and now - mtime > LOG_IN_USE_SECONDS):
            path.unlink(missing_ok=True)
