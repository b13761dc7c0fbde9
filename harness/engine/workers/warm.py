"""A spare's device made ready while it waits for work (processes/cores.py's WARM_DEVICE_ENV).

Its CUDA context is driver work, made at once. Then the first calls every problem's load and trials
make, on tiny tensors: a process's first call into cuBLAS and cuDNN loads their state, and the first
launch of each kernel loads that kernel. On an H200 (torch 2.11) a first small matmul and convolution
took 80-90 and 85-120 ms in a spare; after them a problem's first 4096x4096 matmul took 35-50 ms
instead of 107-143, and its first convolution 28-37 ms instead of 117-380. A reference pays these in
its load and a candidate's worker in its first trial, both on the device's critical path. The calls
launch kernels, so they run only while no timing holds the device (its lock is free, and held for
them), and not at all once the spare has work."""
from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path
from typing import Optional

import torch

from ...integrity.digest import checksum
from ..checking import compare
from ..processes.cores import WARM_DEVICE_ENV, WARM_LOCK_ENV
from ..processes.device_lock import DeviceLock
from .common import randomize_parameters, sync

POLL_S = 0.05  # how often a spare asks whether the device's lock is free
GIVE_UP_S = 60.0  # a spare that found the device held this long makes no calls

# Seconds the first calls took in this process, None where it made none (a reference's load records it).
first_calls_s: Optional[float] = None


def warm_spare(fd: int) -> None:
    """Where this process is a spare on a GPU: its context, then its first calls while the device
    is free and no work has arrived on `fd`."""
    global first_calls_s
    device = os.environ.pop(WARM_DEVICE_ENV, "")
    lock = json.loads(os.environ.pop(WARM_LOCK_ENV, "null"))
    if not device:
        return
    try:
        torch.empty(1, device=device)
    except Exception:  # noqa: BLE001 - the role meets the same failure and reports it with its step
        return
    if lock:
        first_calls_s = when_free(fd, lambda: _quietly(torch.device(device)), Path(lock["cache"]),
                                  lock["key"], int(lock["owner"]))


def when_free(fd: int, calls, cache: Path, key: str, owner: int, give_up_s: float = GIVE_UP_S) -> Optional[float]:
    """`calls()` once the device's lock is free, holding it; not once `fd` has something to read
    (work came) or after `give_up_s`. The seconds they took, or None where they were not made."""
    ends = time.monotonic() + give_up_s
    while time.monotonic() < ends and not _readable(fd, 0):
        with DeviceLock(cache, key, owner=owner, wait=False) as lock:
            if lock.held:
                started = time.monotonic()
                calls()
                return time.monotonic() - started
        _readable(fd, POLL_S)
    return None


def first_calls(device: torch.device) -> None:
    """A matmul and a convolution; a Linear's and a convolution's initialisation and the harness's
    noise on their parameters; draws, a checksum and a comparison, as a load and a trial make them.
    Finished, with the random state as it was."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
        with torch.device(device):
            layers = [torch.nn.Linear(8, 8), torch.nn.Conv2d(1, 1, 3)]
        square = torch.randn(8, 8, device=device)
        layers[0](square @ torch.rand(8, 8, device=device))
        layers[1](torch.randn(1, 1, 4, 4, device=device))
        for layer in layers:
            randomize_parameters(layer, 0)
        checksum([square, torch.randint(0, 8, (8,), device=device)])
        compare.compare(square, square + 1e-6, [str(device)], lambda dtype: (1e-4, 1e-4))
    sync(device)


def _quietly(device: torch.device) -> None:
    try:
        first_calls(device)
    except Exception:  # noqa: BLE001 - a failure is the problem's own to meet, in its role
        pass


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])
