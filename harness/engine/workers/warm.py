"""A spare's device made ready while it waits for work (processes/cores.py's WARM_DEVICE_ENV).

Its CUDA context is driver work, made at once. Then the first calls every problem's load and trials
make, on tiny tensors: a process's first call into cuBLAS and cuDNN loads their state, and the first
launch of each kernel loads that kernel. On an H200 (torch 2.11) a first small matmul and convolution
took 80-90 and 85-120 ms in a spare; after them a problem's first 4096x4096 matmul took 35-50 ms
instead of 107-143, and its first convolution 28-37 ms instead of 117-380. A reference pays these in
its load, which holds the device's lock. The calls launch kernels, so they run in short steps, each
while no one holds the device's lock and no timing waits for it (held for the step, let go of between
two, so that a load waiting for it goes first; DeviceLock's `defer`), and none once the spare has work.

Only a reference process's spare makes them (Children tells it the lock). A candidate's worker pays
its first calls in its first trial, which holds no lock: made ahead by every worker spare too, the
steps kept the lock so busy that over 50 KernelBench copies on an H200 a sweep's timings waited 14.7 s
for it and the next problems' loads 14.0 s; with the workers' left to their first trial, 1.2 and
0.9 s, the check 0.06 s longer (median)."""
from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from ...integrity.digest import checksum
from ..checking import compare, fused
from ..processes.cores import WARM_DEVICE_ENV, WARM_LOCK_ENV
from ..processes.device_lock import DeviceLock
from .common import randomize_parameters, sync

POLL_S = 0.05  # how often a spare asks whether the device's lock is free
# After each step a spare lets go of the lock this long, so that a load or a timing waiting for it takes it.
PAUSE_S = 0.01
GIVE_UP_S = 60.0  # a spare that found the device held this long makes no more calls

# Seconds the first calls took in this process, None where it made none (a reference's load records it).
first_calls_s: Optional[float] = None


def warm_spare(fd: int, role: str) -> None:
    """Where this process is a spare on a GPU: its context; a reference's comparison kernel compiled
    (checking/fused.py); then, where it was told the device's lock (a reference's spare), its first
    calls while the device is free and no work has arrived on `fd`, with the random state as it was."""
    global first_calls_s
    device = os.environ.pop(WARM_DEVICE_ENV, "")
    lock = json.loads(os.environ.pop(WARM_LOCK_ENV, "null"))
    if not device:
        return
    try:
        torch.empty(1, device=device)
    except Exception:  # noqa: BLE001 - the role meets the same failure and reports it with its step
        return
    where = torch.device(device)
    if role == "reference" and not _readable(fd, 0):
        fused.warm(where)
    if lock:
        with torch.random.fork_rng(devices=[where] if where.type == "cuda" else []), torch.no_grad():
            steps = [_quietly(step, where) for step in first_calls(where)]
            first_calls_s = when_free(fd, steps, Path(lock["cache"]), lock["key"], int(lock["owner"]))


def when_free(fd: int, steps: list[Callable[[], object]], cache: Path, key: str, owner: int,
              give_up_s: float = GIVE_UP_S) -> Optional[float]:
    """The `steps` in turn, each holding the device's lock where it is free and no timing waits for it,
    let go of between two (a load waiting for it takes it then); no more once `fd` has something to read
    (work came) or after `give_up_s`. The seconds those made took, None where none was."""
    ends, spent, left = time.monotonic() + give_up_s, 0.0, list(steps)
    while left and time.monotonic() < ends and not _readable(fd, 0):
        with DeviceLock(cache, key, owner=owner, wait=False, defer=True) as lock:
            took = lock.held
            if took:
                started = time.monotonic()
                left.pop(0)()
                spent += time.monotonic() - started
        _readable(fd, PAUSE_S if took else POLL_S)
    return spent if len(left) < len(steps) else None


def first_calls(device: torch.device) -> list[Callable[[], object]]:
    """What a load and a trial call first, in steps of a few kernels each (on an H200 a step's first
    launches take 20-120 ms): a matmul; a convolution; a Linear's and a convolution's initialisation
    and the harness's noise on their parameters; draws and a checksum; a comparison."""
    def layers() -> None:
        with torch.device(device):
            made = [torch.nn.Linear(8, 8), torch.nn.Conv2d(1, 1, 3)]
        for layer in made:
            randomize_parameters(layer, 0)

    def compared() -> object:
        square = torch.randn(8, 8, device=device)
        return compare.compare(square, square + 1e-6, [str(device)], lambda dtype: (1e-4, 1e-4))

    return [lambda: torch.randn(8, 8, device=device) @ torch.rand(8, 8, device=device),
            lambda: torch.nn.functional.conv2d(torch.randn(1, 1, 4, 4, device=device),
                                               torch.randn(1, 1, 3, 3, device=device)),
            layers,
            lambda: checksum([torch.randn(8, 8, device=device), torch.randint(0, 8, (8,), device=device)]),
            compared]


def _quietly(step: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """The step, finished on the device; a failure is the problem's own to meet, in its role."""
    def run() -> None:
        try:
            step()
            sync(device)
        except Exception:  # noqa: BLE001
            pass
    return run


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])
