"""`harness profile`: one forward of a candidate (or the reference) under Nsight
Compute, in a worker process, or under the torch profiler where ncu cannot run; on
a CPU, its calls sampled by perf besides (perf.py), where perf may sample.

The candidate's code runs only in the child (../workers/profile.py); perf runs it
as its own child and reads its samples back in the harness, which runs none of it.
Each profile has a time limit, and ncu's replay passes stay bounded: kernel replay,
at most LAUNCH_COUNT kernels, optionally only those matching a regex.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from ...errors import HarnessError
from ...profiles import Profile, Sampling
from ...results import from_json
from ..processes.ownership import disown, end_processes, pythonpath, spawn
from .ncu import findings, parse_raw
from .perf import (NOT_INSTALLED as NO_PERF, SECONDS, extension_objects, find_perf, parse_script, record_command,
                   refusal, script, summarize)
from .source_lines import source_lines

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
    env: dict[str, str] = field(default_factory=dict)  # for the child: the GPU it sees, the build cache


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


NOT_INSTALLED = "ncu (Nsight Compute) is not installed: per-kernel times from the torch profiler instead"
ON_CPU = "No ncu profile on the CPU (ncu profiles CUDA kernels): the torch profiler's CPU ops, by self time, instead"


class Profiler:
    """Profiles forwards under ncu while it can, else under the torch profiler with the reason
    as each profile's note; on a CPU, with perf's samples of the calls while perf may sample,
    else the reason as the sampling's note. An ncu or a perf found missing, or refused, is not
    tried again: a loop profiling every round pays for the refusal once."""

    def __init__(self, device: str, ncu: Optional[str] = None, perf: Optional[str] = None):
        self.on_gpu = on_gpu = device.startswith("cuda")
        self.ncu = ncu or (find_ncu() if on_gpu else None)
        self.note = "" if self.ncu else NOT_INSTALLED if on_gpu else ON_CPU
        self.perf = None if on_gpu else perf or find_perf()
        self.sampling_note = "" if on_gpu or self.perf else NO_PERF
        self.child: Optional[subprocess.Popen] = None  # the profile in flight
        self.mark = ""  # its mark (ownership.py), which all it starts carries, in whatever session

    def stop(self) -> None:
        """End the profile in flight and everything it started (ncu, the worker under it, whatever the
        candidate left running), reaped: this process is their subreaper once their parents are gone."""
        child = self.child
        if child is not None:
            end_processes({child.pid} if child.poll() is None else set(), self.mark + "\0", spare=child.pid)

    kill = stop  # as ownership.end_all ends what this process owns

    def run_child(self, command: list[str], time_limit_s: float, what: str, env: dict[str, str], cwd: str,
                  check: bool = True) -> str:
        """The child's output; a ProfileError when it runs too long, or (`check`) fails. Its output goes to
        a file, not a pipe: a process the candidate left running would hold a pipe open, and the call with it.
        `cwd`: a scratch directory, where what the candidate writes goes with it."""
        with tempfile.TemporaryFile() as out:
            child, self.mark = spawn(self, env, None, lambda marked: subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=marked, cwd=cwd))
            self.child = child
            try:
                child.wait(timeout=time_limit_s)
            except subprocess.TimeoutExpired:
                raise ProfileError(f"{what} ran past its {time_limit_s:.0f} s limit and was killed.") from None
            finally:
                self.stop()  # on any way out: nothing of it outlives the call
                child.wait()
                self.child = None
                disown(self)
            out.seek(0)
            output = out.read().decode(errors="replace")
        if check and child.returncode != 0 and NO_PERMISSION not in output:
            raise ProfileError(f"{what} failed (exit {child.returncode}): " + output.strip()[-2000:])
        return output

    def __call__(self, request: ProfileRequest) -> Profile:
        started = time.monotonic()
        what = f"the profile of {request.candidate or 'the reference'}"
        env = {**os.environ, **request.env, "PYTHONPATH": pythonpath()}
        with tempfile.TemporaryDirectory(prefix="harness-profile-") as scratch:
            spec_file, out, log = (os.path.join(scratch, n) for n in ("spec.json", "profile.json", "ncu.csv"))

            def write_spec(tool: str, sample: Optional[dict] = None) -> None:
                spec = {"problem": os.path.abspath(request.problem), "device": request.device, "seed": request.seed,
                        "init_seed": request.init_seed, "param_seed": request.param_seed, "tool": tool, "out": out,
                        "candidate": os.path.abspath(request.candidate) if request.candidate else None,
                        "sample": sample}
                Path(spec_file).write_text(json.dumps(spec))

            if self.ncu:
                write_spec("ncu")
                command = ncu_command(self.ncu, spec_file, log, request.kernel_regex)
                output = self.run_child(command, request.time_limit_s, what, env, scratch)
                text = Path(log).read_text(errors="replace") if Path(log).exists() else output
                if NO_PERMISSION not in text + output:
                    kernels, sm_count = parse_raw(text, f"ncu's output for {request.candidate or 'the reference'}")
                    return Profile("ncu", kernels, sm_count, findings(kernels, sm_count),
                                   seconds=time.monotonic() - started)
                self.ncu = None
                self.note = f"ncu may not read the GPU's counters here ({NO_PERMISSION}); to fix it, {PERMISSION_FIX}"
            result, refused = None, None  # refused: what perf said where it sampled nothing
            if self.perf:
                sample = {n: os.path.join(scratch, f"perf.{n}") for n in ("control", "ack", "data")}
                write_spec("torch", {**sample, "seconds": SECONDS})
                command = record_command(self.perf, sample["control"], sample["ack"], sample["data"])
                os.mkfifo(sample["control"])
                os.mkfifo(sample["ack"])
                refused = self.run_child(command + worker_command(spec_file), request.time_limit_s, what, env,
                                         scratch, check=False)
                result = self.sampled(sample["data"], out) if Path(out).exists() else None
            if result is None:
                write_spec("torch")
                # where the worker fails alone too, it raises here: perf is not blamed for it
                self.run_child(worker_command(spec_file), request.time_limit_s, what, env, scratch)
                if refused is not None:
                    self.perf, self.sampling_note = None, refusal(refused)
                result = from_json(Profile, Path(out).read_text())
                result.sampling = None if self.on_gpu else Sampling(note=self.sampling_note)
        result.findings = findings(result.kernels, result.sm_count)
        result.note, result.seconds = self.note, time.monotonic() - started
        return result

    def sampled(self, data: str, out: str) -> Profile:
        """The worker's profile, with perf's samples of its calls (in `data`) read back."""
        result = from_json(Profile, Path(out).read_text())
        calls = result.sampling or Sampling()
        try:
            samples, mappings = parse_script(script(self.perf, data))
        except (OSError, subprocess.TimeoutExpired) as exc:
            result.sampling = replace(
                calls, note=f"perf sampled the calls but could not read the samples back: {exc}")
            return result
        extensions = extension_objects({s.dso for s in samples})
        result.sampling = summarize(samples, extensions, calls)
        result.sampling.lines = source_lines(extensions, samples, mappings)
        if not samples:
            result.sampling.note = "perf took no sample of the calls."
        return result


def profile(request: ProfileRequest, ncu: Optional[str] = None) -> Profile:
    """Profile one forward; `ncu` defaults to the one on PATH or in /usr/local/cuda."""
    return Profiler(request.device, ncu)(request)
