"""`harness profile`: one forward of a candidate (or the reference) under Nsight
Compute, in a worker process, or under the torch profiler where ncu cannot run.

The candidate's code runs only in the child (workers/profile.py). Each profile
has a time limit, and ncu's replay passes stay bounded: kernel replay, at most
LAUNCH_COUNT kernels, optionally only those matching a regex.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import HarnessError
from ..results import from_json
from .ncu import Profile, findings, parse_raw
from .process import pythonpath

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis_Tables", "WarpStateStats",
            "SchedulerStats")
LAUNCH_COUNT = 64  # kernels profiled per forward; each is replayed once per pass its sections need
TIME_LIMIT_S = 300.0
NO_PERMISSION = "ERR_NVGPUCTRPERM"
PERMISSION_FIX = ("let users read GPU counters: add `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to a file "
                  "in /etc/modprobe.d/ and reload the driver (or reboot), or run as root")


class ProfileError(HarnessError):
    """The profiled forward failed or ran past its time limit."""


@dataclass
class ProfileRequest:
    problem: str
    candidate: Optional[str]  # None: the reference
    device: str = "cuda"
    kernel_regex: Optional[str] = None
    seed: int = 1
    init_seed: int = 0
    param_seed: int = 0
    time_limit_s: float = TIME_LIMIT_S


def find_ncu() -> Optional[str]:
    found = shutil.which("ncu")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/ncu")
    return str(default) if default.is_file() and os.access(default, os.X_OK) else None


def ncu_command(ncu: str, spec_file: str, log_file: str, kernel_regex: Optional[str]) -> list[str]:
    command = [ncu, "--profile-from-start", "off", "--csv", "--page", "raw", "--replay-mode", "kernel",
               "--launch-count", str(LAUNCH_COUNT), "--log-file", log_file]
    for section in SECTIONS:
        command += ["--section", section]
    if kernel_regex:
        command += ["--kernel-name", f"regex:{kernel_regex}"]
    return command + worker_command(spec_file)


def worker_command(spec_file: str) -> list[str]:
    return [sys.executable, "-m", "harness.engine.workers", "profile", spec_file]


def run_child(command: list[str], time_limit_s: float, what: str) -> str:
    """The child's output; a ProfileError when it fails or runs too long."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, env={**os.environ, "PYTHONPATH": pythonpath()})
    try:
        output, _ = child.communicate(timeout=time_limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise ProfileError(f"{what} ran past its {time_limit_s:.0f} s limit and was killed.") from None
    if child.returncode != 0 and NO_PERMISSION not in output:
        raise ProfileError(f"{what} failed (exit {child.returncode}): " + output.strip()[-2000:])
    return output


def profile(request: ProfileRequest, ncu: Optional[str] = None) -> Profile:
    """Profile one forward; `ncu` defaults to the one on PATH or in /usr/local/cuda."""
    started = time.monotonic()
    ncu = ncu or (find_ncu() if request.device.startswith("cuda") else None)
    note = "" if ncu or not request.device.startswith("cuda") else \
        "ncu (Nsight Compute) is not installed: per-kernel times from the torch profiler instead"
    what = f"the profile of {request.candidate or 'the reference'}"
    with tempfile.TemporaryDirectory(prefix="harness-profile-") as scratch:
        spec_file, out, log = (os.path.join(scratch, n) for n in ("spec.json", "profile.json", "ncu.csv"))

        def write_spec(tool: str) -> None:
            spec = {"problem": os.path.abspath(request.problem), "device": request.device, "seed": request.seed,
                    "init_seed": request.init_seed, "param_seed": request.param_seed, "tool": tool, "out": out,
                    "candidate": os.path.abspath(request.candidate) if request.candidate else None}
            Path(spec_file).write_text(json.dumps(spec))

        if ncu:
            write_spec("ncu")
            output = run_child(ncu_command(ncu, spec_file, log, request.kernel_regex), request.time_limit_s, what)
            text = Path(log).read_text(errors="replace") if Path(log).exists() else output
            if NO_PERMISSION in text + output:
                note = f"ncu may not read the GPU's counters here ({NO_PERMISSION}); to fix it, {PERMISSION_FIX}"
            else:
                kernels, sm_count = parse_raw(text, f"ncu's output for {request.candidate or 'the reference'}")
                return Profile("ncu", kernels, sm_count, findings(kernels, sm_count),
                               seconds=time.monotonic() - started)
        write_spec("torch")
        run_child(worker_command(spec_file), request.time_limit_s, what)
        result = from_json(Profile, Path(out).read_text())
    result.findings = findings(result.kernels, result.sm_count)
    result.note, result.seconds = note, time.monotonic() - started
    return result
