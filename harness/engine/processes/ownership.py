"""Owning processes: every process the harness starts, and all of theirs, whatever session they
move to, stays the harness's to find and end.

Workers and the harness itself are child subreapers (orphans reparent to them, not to init),
every process started carries a mark in its environment that its descendants inherit, and each
live worker is listed in a registry under the cache directory, so that the next harness start
can end what a killed harness left behind. Ending a tree stops it first, then kills and reaps it.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

MARK = "HARNESS_PROCESS"  # OWNER/SERIAL, inherited by everything a child starts
REGISTRY = "processes"  # under the cache directory: a file per harness process, its workers' pids


def become_subreaper() -> None:
    """Orphans of anything this process starts reparent to it, not to init, so they stay findable."""
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def pythonpath() -> str:
    """Children import this very harness package, wherever it was imported from: the folder
    that holds the package goes first on their path."""
    root = str(Path(__file__).resolve().parents[3])
    rest = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{rest}" if rest else root



def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/PID/stat after the command name (state is [0], ppid [1], start time [19])."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> Optional[int]:
    """When the process started (clock ticks since boot): with the pid, names it even after pid reuse."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _parents() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    table = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields:
            table[pid] = int(fields[1])
    return table


def descendants(roots: int | Iterable[int]) -> set[int]:
    roots = {roots} if isinstance(roots, int) else set(roots)
    parents = _parents()
    found, frontier = set(), roots
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found - roots
        found |= frontier
    return found


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds spent by `root`'s live descendants, and by its children that ended and were waited for."""
    ticks = os.sysconf("SC_CLK_TCK")
    live = 0
    for pid in descendants(root):
        fields = _stat(pid)
        if fields and len(fields) > 12:
            live += int(fields[11]) + int(fields[12])  # utime, stime
    ended = resource.getrusage(resource.RUSAGE_CHILDREN) if root == os.getpid() else None
    return live / ticks + ((ended.ru_utime + ended.ru_stime) if ended else 0.0)


def marked(prefix: str) -> set[int]:
    """Processes whose environment carries MARK=PREFIX...: whatever a child started, in any session.
    (End the prefix with NUL to match one mark exactly.)"""
    needle = f"\0{MARK}={prefix}".encode()
    found = set()
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in b"\0" + f.read():
                    found.add(pid)
        except OSError:
            continue
    return found


def stop_tree(root: int, mark: Optional[str] = None) -> set[int]:
    """`root`, every descendant and every process carrying `mark` (ended with NUL: exactly) stopped (SIGSTOP)
    before this returns: none runs another instruction until continued, whatever it was doing (one in
    uninterruptible sleep stops once it wakes: STOP_WAIT_S). The pids stopped, for `continue_all`."""
    tree = descendants(root) | {root} | (marked(mark) - {os.getpid()} if mark else set())
    for pid in tree:
        try:
            os.kill(pid, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            pass
    _until_stopped(tree)
    return tree


def continue_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def end_processes(roots: set[int], mark: Optional[str] = None, spare: Optional[int] = None) -> set[int]:
    """Stop every process under `roots` or carrying `mark`, then kill them all; the pids killed,
    gone when it returns (reap)."""
    stopped = kill_processes(roots, mark)
    reap(stopped, spare)
    return stopped


def kill_processes(roots: set[int], mark: Optional[str] = None) -> set[int]:
    """SIGSTOP then SIGKILL to every process under `roots` or carrying `mark`: none runs another
    instruction once this returns, though the kernel may still be tearing them down. The pids killed.

    Stopping first keeps a fork bomb from outrunning the kill."""
    stopped: set[int] = set()
    for _ in range(50):
        found = roots | descendants(roots | stopped)
        fresh = (found | (marked(mark) if mark else set())) - stopped - {os.getpid()}
        if not fresh:
            break
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        stopped |= fresh
        _until_stopped(fresh)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return stopped


def end_own_tree() -> None:
    """Every process this one started, and every orphan of theirs (this one is their subreaper), killed and
    reaped: a worker that ends on its own leaves nothing, running or a zombie, for its parent to take in."""
    kill_processes(descendants(os.getpid()))
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:  # none left
            return


STOP_WAIT_S = 0.5  # the most a round waits for its processes to stop (one in uninterruptible sleep stops late)


def _until_stopped(pids: set[int]) -> None:
    """Until each of `pids` is stopped or gone. A process told to stop in the middle of a fork stops
    once the fork returns, so the child it made is there for the next round to find; without the wait a
    round could look before that child existed, find nothing new and end the stopping, and the child,
    never stopped, outlived the kill (a fork bomb's daemon did, once in a suite, under init)."""
    _wait_while(pids, lambda pid: _state(pid) not in STOPPED + GONE, STOP_WAIT_S, 0.001)


def reap(stopped: set[int], spare: Optional[int] = None) -> None:
    """Until the killed processes are gone (briefly: SIGKILL lands asynchronously, and a process that
    held a GPU context takes 0.1-0.2 s to be torn down). Orphans reparented to this process are reaped;
    `spare` (a child a Popen waits for) is left to its Popen. What is still to be reaped after REAP_S (a
    killed parent torn down late, under load, hands its zombies to this process later) is reaped by a
    thread of its own as it comes, so that no zombie is left to a long-lived harness."""
    _wait_while(stopped, running, 2.0, 0.01)
    left, deadline = _unreaped(stopped - {spare}, stopped), time.monotonic() + REAP_S
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = _unreaped(left, stopped)
    if left:
        threading.Thread(target=_reap_late, args=(left, stopped), name="harness-reaper", daemon=True).start()


REAP_S = 2.0  # how long reap waits for the killed processes itself
LATE_REAP_S = 600.0  # how long a thread goes on reaping what reap left


def _unreaped(pids: set[int], killed: set[int]) -> set[int]:
    """Those of `pids` still to be reaped here: a zombie of this process now, or one whose parent was
    killed too and is not yet gone (it comes to this process, their subreaper, once its parent is)."""
    left = set()
    for pid in pids:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] != pid:
                left.add(pid)  # ours, still being torn down
        except ChildProcessError:  # another's child: reparented to this one once its killed parent is gone
            fields = _stat(pid)
            # looked at again: one whose parent was killed, one reparented here since the waitpid above, one
            # whose stat could not be read as it exits
            if (fields is None and _exists(pid)) or (fields and int(fields[1]) in killed | {os.getpid()}):
                left.add(pid)
    return left


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reap_late(left: set[int], killed: set[int]) -> None:
    deadline = time.monotonic() + LATE_REAP_S
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _unreaped(left, killed)


STOPPED, GONE = ("T", "t"), ("Z", "X")  # process states (/proc/PID/stat): stopped (or traced); a zombie, dead


def _state(pid: int) -> str:
    """The process's state letter, "X" (dead) where there is no such process."""
    fields = _stat(pid)
    return fields[0] if fields else "X"


def _wait_while(pids: set[int], still: Callable[[int], bool], limit_s: float, poll_s: float) -> None:
    """Until none of `pids` is `still` so, or `limit_s` has passed."""
    deadline = time.monotonic() + limit_s
    while any(still(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(poll_s)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    return _state(pid) not in GONE


def _identity(pid: int) -> str:
    return f"{pid}-{start_time(pid)}"


# --- the registry: live workers of each harness process, for the next start ----

_OWNER = _identity(os.getpid())


def _pid_namespace() -> str:
    """This process's pid namespace: pids, and so owners' identities, mean something only within it."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "unknown"


# A harness in another pid namespace (a container sharing the cache) would look dead from here,
# its owner pid naming another process or none: each namespace keeps its own list.
_NAMESPACE = _pid_namespace()


def _registry_file(registry: Path) -> Path:
    return Path(registry) / _NAMESPACE / _OWNER


_registries: set[Path] = set()  # where this process listed its workers


def _register(registry: Path, pid: int) -> None:
    _registry_file(registry).parent.mkdir(parents=True, exist_ok=True)
    _registries.add(Path(registry))
    with open(_registry_file(registry), "a") as f:
        f.write(f"{_identity(pid)}\n")


def end_leftovers(registry: Path) -> Optional[str]:
    """End the workers (and all they started) of harness processes that died without
    ending them, e.g. by SIGKILL; one line saying what was ended, or None. Only commands
    that start processes call it: a listing ends nothing."""
    try:
        entries = sorted((Path(registry) / _NAMESPACE).iterdir())
    except OSError:
        return None
    ended, owners = set(), []
    for entry in entries:
        owner = entry.name
        pid, _, started = owner.partition("-")
        if not pid.isdigit() or owner == _OWNER or _identity(int(pid)) == owner:
            continue  # ours, or a harness still running
        try:
            workers = entry.read_text().split()
        except OSError:
            continue
        roots = {int(w.partition("-")[0]) for w in workers
                 if w.partition("-")[0].isdigit() and _identity(int(w.partition("-")[0])) == w}
        killed = end_processes(roots, f"{owner}/")
        if killed:
            ended |= killed
            owners.append(pid)
        entry.unlink(missing_ok=True)
    if not ended:
        return None
    return (f"Ended {len(ended)} process(es) left running by harness process(es) {', '.join(owners)}, "
            "which ended without stopping them.")



# --- every live child, so that any way out of the harness ends them ---------------

_live: set = set()  # every live Child (child.py): anything with a kill()
_live_lock = threading.Lock()
_serial = 0


def end_all() -> None:
    """Kill every child still alive, with all it started: the harness is ending."""
    with _live_lock:
        children = list(_live)
    for child in children:
        child.kill()
    for registry in _registries:
        _registry_file(registry).unlink(missing_ok=True)


def _start_owning() -> None:
    """Once per harness process: be the subreaper of everything started, and end it all at exit."""
    become_subreaper()
    atexit.register(end_all)


def spawn(owner, env: dict, registry: Optional[Path], start: Callable[[dict], object]) -> tuple[object, str]:
    """Start a process this harness owns: `start(env)` starts it (subprocess.Popen, or the fork
    server) with its mark in `env` (and so in all it starts), `owner` listed live until disowned
    (end_all kills it), and its pid in `registry` for the next start where one is given. The
    process's handle and its mark."""
    global _serial
    with _live_lock:
        if not _serial:
            _start_owning()
        _serial += 1
        mark = f"{_OWNER}/{_serial}"
        proc = start({**env, MARK: mark})
        _live.add(owner)
        if registry:
            _register(registry, proc.pid)
    return proc, mark


def disown(owner) -> None:
    """`owner`'s processes are ended: end_all has nothing left to kill for it."""
    with _live_lock:
        _live.discard(owner)
