"""Which cores time and which build, and how many builds run at once.

On a GPU host the timing processes (the reference process and the candidate
workers) get cores of their own, and builds (nvcc, cc1plus: children of the
build process, which inherit its affinity and priority) run on the other cores
at low priority: a host-bound reference of a few short launches reads several
times slower beside a compiler on its core. On --device cpu the candidate's
timed code uses every core, so no split helps: there builds never run while a
candidate is timed (the pool waits for the last build before timing).
"""
from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass
from typing import Optional

from ...device import visible_gpus

# cores kept for the timing side on a GPU host, per GPU: the reference process and the candidate
# worker each drive their GPU from one host thread, and they alternate, so two cores give each a
# core of its own with room for the other's Python. Each GPU's processes run on its own pair (a
# reference loading a problem draws its inputs on the host: beside another GPU's, on shared
# cores, it waits for them), at most half the host's cores for all GPUs together.
TIMING_CORES = 2
# fewer cores than this and a reserved pair would leave builds almost nothing: no split
MIN_CORES_TO_SPLIT = 4
BUILD_NICE = 10  # builds yield to anything else on their cores, the harness's own threads included
# Host memory one build may hold at its peak. A KernelBench-style candidate (torch/extension.h
# inside its .cu, load_inline, torch 2.13, nvcc 13.0, measured with /usr/bin/time -v on a
# 2-core host): the .cu step peaks at 3.1 GB resident in one process (cudafe++ alone holds
# 2.3 GB on torch's headers), the binding's g++ (main.cpp) at 1.5 GB, and ninja runs the two
# side by side. So 4 GB: the .cu's peak with most of the binding's beside it.
BUILD_MEMORY_BYTES = 4 << 30
CPUS_ENV, NICE_ENV = "HARNESS_CPUS", "HARNESS_NICE"  # read by a child as it starts (workers/__main__.py)
# A spare (a process importing torch ahead of its work) waits on these cores until it gets work, then
# moves to its CPUS_ENV ones: its seconds of imports never take the timing cores from a timing in progress.
SPARE_CPUS_ENV = "HARNESS_SPARE_CPUS"
_timing_later: set[int] = set()  # a spare's own cores, taken when it gets work (take_own_cores)
# A spare imports torch (and waits for work) at this niceness, so a timing running meanwhile keeps its CPU.
START_NICE_ENV = "HARNESS_START_NICE"
# A spare on a GPU makes its CUDA context (0.15-0.35 s of driver work, no kernel) on this device while
# it waits for work, so its first candidate's start does not pay for it; then, in steps taken while the
# device's lock (WARM_LOCK_ENV: its cache, key and owner, as JSON) is free, the first calls a load and a
# trial make: cuBLAS's, cuDNN's, the harness's draws and comparison (workers/warm.py).
WARM_DEVICE_ENV = "HARNESS_WARM_DEVICE"
WARM_LOCK_ENV = "HARNESS_WARM_LOCK"


@dataclass(frozen=True)
class Cores:
    timing: tuple[int, ...]  # empty: no reservation, the timing side shares every core
    build: tuple[int, ...]

    def timing_env(self, spare: bool = False) -> dict:
        """Where a timing process runs; a `spare` imports on the build cores first (take_own_cores)."""
        if not self.timing:
            return {}
        return {CPUS_ENV: _cpus(self.timing), **({SPARE_CPUS_ENV: _cpus(self.build)} if spare and self.build else {})}

    def build_env(self) -> dict:
        return {**({CPUS_ENV: _cpus(self.build)} if self.timing else {}), NICE_ENV: str(BUILD_NICE)}

    def build_prefix(self) -> list[str]:
        """For a compiler the harness runs itself: the prefix that runs it as the build
        children run theirs, at low priority, on the build cores where some are reserved."""
        prefix = ["nice", "-n", str(BUILD_NICE)] if shutil.which("nice") else []
        return prefix + (["taskset", "-c", _cpus(self.build)] if self.timing and shutil.which("taskset") else [])


def _cpus(cores: tuple[int, ...]) -> str:
    return ",".join(map(str, cores))


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on (a container or taskset may allow fewer than cpu_count)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def split_cores(device: str, cores: Optional[tuple[int, ...]] = None, gpus: Optional[int] = None,
                gpu: Optional[int] = None) -> Cores:
    """The timing side's cores and the builds' on `device`, for a host with `gpus` GPUs (default:
    those this process sees). On a GPU host with MIN_CORES_TO_SPLIT cores or more, the last
    TIMING_CORES per GPU go to timing, at most half (the first cores are where the system's own
    interrupts and daemons tend to land); with `gpu` (its index), the timing side is that GPU's
    own share of them, where there is a core for each GPU. On the CPU, or with fewer cores (a
    2-core machine has none to spare: the timing would lose half its machine), nothing is
    reserved and builds only run at low priority."""
    cores = cores if cores is not None else usable_cores()
    if device == "cpu" or len(cores) < MIN_CORES_TO_SPLIT:
        return Cores((), cores)
    count = max(1, _gpu_count() if gpus is None else gpus)
    kept = min(TIMING_CORES * count, len(cores) // 2)
    timing, build = cores[-kept:], cores[:-kept]
    share = kept // count
    if gpu is not None and share:
        timing = timing[(gpu % count) * share:(gpu % count + 1) * share]
    return Cores(timing, build)


@functools.lru_cache(maxsize=1)
def _gpu_count() -> int:
    """Asked of nvidia-smi once: every Evaluator splits the cores, a sweep makes two per problem."""
    return len(visible_gpus())


def available_memory() -> Optional[int]:
    """MemAvailable from /proc/meminfo in bytes, or None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_build_jobs(device: str = "cuda") -> int:
    """One build per build core. A build runs at most two compilers (ninja starts the binding's
    g++ beside the .cu's nvcc, whose passes run one after the other) and the binding's ends
    first, so one build a core keeps every core busy for little oversubscription."""
    return max(1, len(split_cores(device).build))


def build_slots(jobs: int, memory: Optional[int] = None, per_build: int = BUILD_MEMORY_BYTES) -> int:
    """Builds at once: `jobs`, fewer where the host's available memory (MemAvailable unless
    given) holds fewer than that many builds of `per_build` bytes; always at least one."""
    memory = available_memory() if memory is None else memory
    return max(1, min(jobs, memory // per_build) if memory else jobs)


def take_own_cores() -> None:
    """In a spare that got its work: every thread of it (torch's too) onto its own cores."""
    if _timing_later:
        try:
            threads = [int(t) for t in os.listdir("/proc/self/task")]
        except OSError:
            threads = [0]
        _set_affinity(threads, _cpus(tuple(sorted(_timing_later))))
        _timing_later.clear()


def _set_affinity(threads: list[int], cpus: str) -> None:
    if not cpus:
        return
    for thread in threads:
        try:
            os.sched_setaffinity(thread, {int(c) for c in cpus.split(",")})
        except (AttributeError, OSError, ValueError):
            pass  # a core gone since (hotplug, a narrower cgroup), a thread ended: run where allowed


def apply_from_env() -> None:
    """In a child as it starts: the cores and priority its parent chose (inherited by whatever
    it runs, nvcc and ninja included)."""
    cpus, spare = os.environ.pop(CPUS_ENV, ""), os.environ.pop(SPARE_CPUS_ENV, "")
    if spare and cpus:
        _timing_later.update(int(c) for c in cpus.split(","))
    _set_affinity([0], spare or cpus)
    nice = os.environ.pop(NICE_ENV, "")
    if nice:
        os.nice(int(nice))
