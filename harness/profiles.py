"""What a profiler found for one forward of a candidate: its kernels, one by one, and the findings
read from them (engine/profiling/ncu.py and engine/profiling/torch_trace.py fill them in; EvalResult.profile holds one);
on a CPU, perf's samples of its calls by function (engine/profiling/perf.py).
They round-trip to JSON as results.py's types do.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Stall:
    reason: str  # ncu's name: long_scoreboard, barrier, ...
    cycles: float  # warp cycles stalled on it per issued instruction


@dataclass
class KernelProfile:
    """One kernel launch. Beyond name and duration every field may be missing:
    the torch profiler fallback knows fewer, and ncu omits what a section lacks."""

    name: str
    duration_us: float
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    registers: Optional[int] = None  # per thread
    shared_mem_bytes: Optional[int] = None  # per block, static and dynamic
    achieved_occupancy: Optional[float] = None  # % of the SM's warp slots
    theoretical_occupancy: Optional[float] = None
    occupancy_limiters: list[str] = field(default_factory=list)  # what caps the theoretical occupancy
    dram_pct: Optional[float] = None  # of peak
    sm_pct: Optional[float] = None  # compute (SM) throughput, of peak
    l2_hit_pct: Optional[float] = None  # reads
    sectors_per_request: Optional[float] = None  # global loads
    bytes_per_sector: Optional[float] = None  # global loads: of the 32 bytes each sector moves, how many are used
    bank_conflict_pct: Optional[float] = None  # of shared-memory wavefronts
    stalls: list[Stall] = field(default_factory=list)  # the top reasons, largest first
    bottleneck: str = ""  # memory, compute, latency or launch ("" when unknown)

    @property
    def blocks(self) -> Optional[int]:
        return None if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]


class Group(enum.Enum):
    """Whose code a sample landed in."""

    EXTENSION = "extension"  # the candidate's own shared objects, built by torch's cpp_extension
    TORCH = "torch"  # libtorch, libc10 and the rest of torch's libraries
    PYTHON = "python"  # the interpreter
    KERNEL = "kernel"
    OTHER = "other"  # libc, libm, the OpenMP runtime, ...


@dataclass
class SampledFunction:
    symbol: str  # demangled, as perf names it
    library: str  # the shared object's file name
    group: Group
    samples: int


@dataclass
class SampledLine:
    """A source line of the candidate's extension, where it was built with debug info."""

    file: str  # the file's name: main.cpp is what load_inline writes cpp_sources to
    line: int
    samples: int
    text: str = ""  # the line itself, where the source file is still there


@dataclass
class GroupShare:
    group: Group
    samples: int
    libraries: list[str] = field(default_factory=list)  # the shared objects' file names, most samples first


@dataclass
class Sampling:
    """perf's samples of the calls of one model, repeated for a while, on a CPU: where the time goes by
    function, inside a C++ extension too, which the torch profiler sees as one opaque call."""

    samples: int = 0
    calls: int = 0  # forwards sampled
    seconds: float = 0.0  # the calls' wall time
    threads: int = 0  # torch's intra-op threads, as the timing runs them
    frequency: int = 0  # samples a second perf asked for
    groups: list[GroupShare] = field(default_factory=list)  # most samples first
    functions: list[SampledFunction] = field(default_factory=list)  # the most sampled, most first
    lines: list[SampledLine] = field(default_factory=list)  # the extension's most sampled lines, most first
    note: str = ""  # why there are no samples: perf absent, not permitted, failed


@dataclass
class Profile:
    """What a profiler found for one forward of one model (`harness profile`, `harness run --profile`)."""

    tool: str  # "ncu", "torch" (CUDA kernels) or "torch-cpu" (CPU ops)
    kernels: list[KernelProfile] = field(default_factory=list)
    sm_count: Optional[int] = None
    findings: list[str] = field(default_factory=list)
    note: str = ""  # why the fallback ran instead of ncu
    seconds: float = 0.0  # what the profile cost, wall clock
    sampling: Optional[Sampling] = None  # on a CPU, perf's samples of the calls
