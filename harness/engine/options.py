"""What one evaluation is asked to do (EvalOptions), and the derived settings every process of
it shares: the build cache, the logs, the limits on a candidate's processes, its GPU."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from . import stopping
from .processes.child import MAX_LOG_BYTES, MAX_PROCESSES, Limits, default_host_memory
from .processes.ownership import REGISTRY
from .processes.protocol import StopRule
from .profiling.profile import TIME_LIMIT_S
from .scrutiny import AUDIT, FAST, Scrutiny


# An audit's trials, at least: three times the fast verdict's, every one against float64 too
AUDIT_TRIALS = 15
# Test-only: invariants the fast verdict skips (EvalOptions.weakened); the audit's tests weaken the judge with it.
WEAKEN_VARIABLE = "HARNESS_TEST_WEAKEN"


def default_cache_dir() -> Path:
    """Where builds, logs and locks go unless EvalOptions.cache_dir says: $HARNESS_CACHE_DIR, else the
    user's cache directory."""
    if os.environ.get("HARNESS_CACHE_DIR"):
        return Path(os.environ["HARNESS_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harness"


@dataclass
class EvalOptions:
    device: str = "cpu"
    trials: int = 5
    build_timeout: float = 900.0
    run_timeout: float = 600.0
    cache_dir: Optional[Path] = None
    compile_baseline: bool = False
    time_cap: float = 10.0
    stop: str = stopping.DEFAULT  # the stopping criterion's name (stopping.CRITERIA)
    stop_target: Optional[float] = None  # its threshold; None: the criterion's default for the device
    min_samples: int = 10
    gpu: Optional[int] = None  # physical GPU index; children see only that GPU
    policy: str = "warn"  # "strict": static findings (reference op, torch.compile, ...) reject
    shapes: str = "warn"  # other shapes: "warn" on a failure, "strict" rejects, "off" skips the check
    logs_dir: Optional[Path] = None  # where run logs go; default inside the cache
    max_host_memory: Optional[int] = None  # bytes for a candidate's whole process tree; None: default_host_memory()
    max_processes: int = MAX_PROCESSES
    max_log_bytes: int = MAX_LOG_BYTES
    # "train": both models run in the mode they are constructed in (training, as KernelBench
    # runs them: BatchNorm on batch statistics, dropout active); "eval": both in eval()
    model_mode: str = "train"
    # bytes the problem may use on its device, both processes together; None: what the device
    # has free when the reference starts (tests set it to see the fit refusal)
    memory_limit: Optional[int] = None
    # after a correct verdict, one forward under ncu (else the torch profiler), for the loop's feedback
    profile: bool = False
    profile_kernel: Optional[str] = None  # ncu's --kernel-name regex; None: every kernel, up to LAUNCH_COUNT
    profile_time_limit: float = TIME_LIMIT_S
    # allclose tolerances for every dtype, over the problem's (KernelBench's leaderboard used 1e-2)
    atol: Optional[float] = None
    rtol: Optional[float] = None
    # forward and backward checked and timed as one call (workers/backward.py); a problem's BACKWARD = True sets it too
    backward: bool = False
    # the headline clock on a GPU (results.Clock): "gpu", calls queued with the queue kept full, or "latency",
    # a synchronize after each call (KernelBench's); both are measured and reported either way
    clock: str = "gpu"
    audit: bool = False  # every invariant at its strictest (AUDIT): harness audit's second opinion

    @property
    def scrutiny(self) -> Scrutiny:
        return AUDIT if self.audit else FAST

    def audited(self) -> "EvalOptions":
        """These options at their strictest, as an audit judges: AUDIT's scrutiny, more trials (AUDIT_TRIALS),
        the same device and clock."""
        return replace(self, audit=True, trials=max(AUDIT_TRIALS, 3 * self.trials))

    def weakened(self, invariant: str) -> bool:
        """Whether the tests switched `invariant` off for the fast verdict ($HARNESS_TEST_WEAKEN, a comma list:
        "precision"), to show that an audit, which no switch weakens, still catches what it guards."""
        return not self.audit and invariant in os.environ.get(WEAKEN_VARIABLE, "").split(",")

    def stop_threshold(self) -> float:
        """The stopping criterion's threshold: as given, else its default for the device (a CPU's
        samples wander more than queued GPU samples)."""
        if self.stop_target is not None:
            return self.stop_target
        return stopping.criterion(self.stop).default_target(self.device)

    def stop_rule(self, time_cap: float) -> StopRule:
        """When one timing stops, with `time_cap` seconds of sampling at the most."""
        return StopRule(self.stop, self.stop_threshold(), self.min_samples, time_cap=time_cap, clock=self.clock)

    def resolved_cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

    def logs(self) -> Path:
        return Path(self.logs_dir) if self.logs_dir else self.resolved_cache() / "logs"

    def registry(self) -> Path:
        """The record of live children, which a later harness reaps if this one dies."""
        return self.resolved_cache() / REGISTRY

    def limits(self) -> Limits:
        """What a candidate's process tree may hold."""
        return Limits(self.max_host_memory or default_host_memory(), self.max_processes, self.max_log_bytes)

    def forked(self) -> bool:
        """Whether its workers are forked from the fork server (processes/forkserver.py): on a CPU, where
        it saves each worker torch's import. On a GPU host workers start as fresh interpreters (spares
        import ahead there): forked ones made a sweep of 16 level 1 copies 2.1-2.6x slower on an H100
        (143-173 s against 67 s), between its problems, for a reason not yet found."""
        return self.device == "cpu"

    def child_env(self, entry=None) -> dict:
        """A child's environment: the candidate's build entry (building.cache.BuildEntry), and only this
        evaluation's GPU."""
        env = entry.env() if entry else {}
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env
