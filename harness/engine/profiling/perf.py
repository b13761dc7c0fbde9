"""perf's sampling profile of a model's calls on a CPU, where the torch profiler sees a C++
extension's call as one opaque op.

The profile worker runs under `perf record` with its events off (`--delay=-1`); the worker turns
them on around its calls through perf's control fifo and off after, so the build, the imports
and the torch profiler's forward stay out of the samples. `perf script` then lists each sample's
address, function and shared object, read here into functions grouped by whose code they are.
Pure but for what runs perf or looks at files: find_perf, script, extension_objects.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ...profiles import Group, GroupShare, SampledFunction, Sampling

FREQUENCY = 1999  # samples a second: off the 1000 Hz of the kernel's timers, so the two do not beat
SECONDS = 1.0  # how long the calls run under perf: about 2000 samples
TOP_FUNCTIONS = 30  # kept in the record; the text shows fewer
LIBRARIES = 3  # named per group
SCRIPT_LIMIT_S = 120.0
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def find_perf() -> Optional[str]:
    return shutil.which("perf")


def record_command(perf: str, control: str, ack: str, data: str) -> list[str]:
    """`perf record` of the command that follows, its events off until enabled through `control`
    (a fifo perf acknowledges on `ack`); no build-id cache, so nothing is written outside `data`."""
    return [perf, "record", "-F", str(FREQUENCY), "--delay=-1", "--control", f"fifo:{control},{ack}",
            "--no-buildid-cache", "--no-buildid", "-o", data, "--"]


def refusal(output: str) -> str:
    """Why perf could not sample here, in one sentence, from what it said."""
    if "perf_event_paranoid" in output:
        try:
            level = f" is {PARANOID.read_text().strip()}"
        except OSError:
            level = ""
        return (f"perf may not sample processes here (kernel.perf_event_paranoid{level}; "
                "`sudo sysctl kernel.perf_event_paranoid=2` lets a user profile their own), so the candidate's "
                "own C++ code is not sampled: the torch profiler's ops alone.")
    said = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "nothing")
    return f"perf could not sample the calls here (it said: {said[:300]}): the torch profiler's ops alone."


NOT_INSTALLED = ("perf (Linux perf) is not installed, so the candidate's own C++ code is not sampled: the torch "
                 "profiler's ops alone.")


# --- perf script's output -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    ip: int
    symbol: str
    dso: str  # the shared object's path as perf recorded it


@dataclass(frozen=True)
class Mapping:
    """Where a shared object's executable pages were mapped: `length` bytes at `start`, from file offset `offset`."""

    path: str
    start: int
    length: int
    offset: int


SAMPLE = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)\s*$")
MMAP = re.compile(r"PERF_RECORD_MMAP2? [^\[]*\[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|0)[^\]]*\]: r-xp (.+)$")


def script_command(perf: str, data: str) -> list[str]:
    return [perf, "script", "-i", data, "-F", "ip,sym,dso", "--show-mmap-events"]


def parse_script(text: str) -> tuple[list[Sample], list[Mapping]]:
    """The samples and the executable mappings in `perf script -F ip,sym,dso --show-mmap-events` output.
    A symbol may hold spaces and parentheses (a C++ lambda's name); the shared object is the last
    parenthesised field."""
    samples, mappings = [], []
    for line in text.splitlines():
        if "PERF_RECORD_MMAP" in line:
            found = MMAP.search(line)
            if found:
                start, length, offset, path = found.groups()
                mappings.append(Mapping(path.strip(), int(start, 16), int(length, 16), int(offset, 16)))
            continue
        found = SAMPLE.match(line)
        if found:
            samples.append(Sample(int(found[1], 16), found[2].strip(), found[3].strip()))
    return samples, mappings


def script(perf: str, data: str) -> str:
    """perf script's text of `data`; it reads the shared objects' symbols, it runs none of their code."""
    done = subprocess.run(script_command(perf, data), capture_output=True, timeout=SCRIPT_LIMIT_S)
    if done.returncode != 0:
        raise OSError(done.stderr.decode(errors="replace").strip()[-500:] or f"perf script exit {done.returncode}")
    return done.stdout.decode(errors="replace")


# --- whose code ---------------------------------------------------------------------------------------------------

def extension_objects(dsos: Iterable[str]) -> set[str]:
    """The shared objects torch's cpp_extension built (load_inline leaves build.ninja beside each)."""
    return {d for d in dsos if d.startswith("/") and (Path(d).parent / "build.ninja").is_file()}


def group_of(dso: str, extensions: set[str]) -> Group:
    name = os.path.basename(dso)
    if dso in extensions:
        return Group.EXTENSION
    if name.startswith("[kernel"):
        return Group.KERNEL
    if "/torch/lib/" in dso or name.startswith(("libtorch", "libc10")):
        return Group.TORCH
    if name.startswith("libpython") or re.fullmatch(r"python[\d.]*", name):
        return Group.PYTHON
    return Group.OTHER


def summarize(samples: list[Sample], extensions: set[str], calls: Sampling) -> Sampling:
    """The samples by function and by group, most first, beside what the worker said of its `calls`."""
    by_function = Counter((s.symbol, s.dso) for s in samples)
    by_library = Counter(s.dso for s in samples)
    groups: dict[Group, GroupShare] = {}
    for dso, n in by_library.most_common():
        share = groups.setdefault(group_of(dso, extensions), GroupShare(group_of(dso, extensions), 0))
        share.samples += n
        if len(share.libraries) < LIBRARIES:
            share.libraries.append(os.path.basename(dso))
    functions = [SampledFunction(symbol, os.path.basename(dso), group_of(dso, extensions), n)
                 for (symbol, dso), n in by_function.most_common(TOP_FUNCTIONS)]
    return Sampling(samples=len(samples), calls=calls.calls, seconds=calls.seconds, threads=calls.threads,
                    frequency=FREQUENCY, groups=sorted(groups.values(), key=lambda g: -g.samples), functions=functions)
