"""How a worker starts, whether a fresh interpreter (`python -m harness.engine.workers ROLE FD`,
__main__.py) or forked from the fork server (processes/forkserver.py): its cores and priority
first (begin), then its limits, its spec and its role (main).

Roles: build (build.py), reference (reference.py), candidate (candidate.py). The
first message on FD is the spec (from the harness); every later message from a
child is JSON plus raw tensor bytes (see ../processes/channel.py). The profile role
(profile.py) runs under ncu, which need not pass FDs on: it reads its spec from a
file, `python -m harness.engine.workers profile SPEC.json`.
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys

from ..processes import channel
from ..processes.cores import START_NICE_ENV, apply_from_env, take_own_cores
from ..processes.ownership import become_subreaper, end_own_tree


def begin() -> None:
    """The cores and priority of this role (processes/cores.py), before torch starts its threads."""
    apply_from_env()
    if os.environ.get(START_NICE_ENV):
        # a spare worker: import torch (or wait for work) without taking CPU from a timing in progress
        os.nice(int(os.environ[START_NICE_ENV]))


FILE_SIZE_LIMIT = 16 << 30


def confine(role: str) -> None:
    """Limits for processes that run candidate code."""
    import resource

    # Orphans of anything started here are re-parented to this process, not to
    # init, so the harness can find and kill the whole tree.
    become_subreaper()
    if role == "reference":
        return
    try:  # under memory pressure the kernel kills this process first, not the harness
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def main(argv: list[str]) -> None:
    role = argv[1]
    faulthandler.enable()  # a segfault leaves a Python stack in the log
    confine(role)
    from ...integrity.guards import dispatch_tables
    from .roles import ROLES, profile_role  # torch: imported here, after begin()
    from .warm import warm_spare

    if role == "profile":
        try:
            with open(argv[2]) as f:
                profile_role(json.load(f))
        finally:
            end_own_tree()
        sys.stdout.flush()
        os._exit(0)
    fd = int(argv[2])
    if role == "candidate":
        dispatch_tables()  # before any candidate code, and a spare's before its candidate comes (guards.DispatchWatch)
    warm_spare(fd, role)  # a spare on a GPU: its device made ready while it waits for work on fd
    conn = channel.Channel.from_fd(fd)
    spec = channel.recv(conn).header
    if not spec.get("staged"):  # a staged candidate's worker moves at its turn (candidate.py)
        take_own_cores()  # a spare waited on the build cores; its work runs on its own
    if os.environ.get(START_NICE_ENV):
        try:  # started as a spare at low priority; now it has work (raising it back needs root)
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            pass
    ROLES[role](conn, spec)
    end_own_tree()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate extensions and CUDA can hang or crash in it.
    os._exit(0)
