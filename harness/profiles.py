"""What a profiler found for one forward of a candidate: its kernels, one by one, and the findings
read from them (engine/profiling/ncu.py and engine/profiling/torch_trace.py fill them in; EvalResult.profile holds one).
They round-trip to JSON as results.py's types do.
"""
from __future__ import annotations

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


@dataclass
class Profile:
    """What a profiler found for one forward of one model (`harness profile`, `harness run --profile`)."""

    tool: str  # "ncu", "torch" (CUDA kernels) or "torch-cpu" (CPU ops)
    kernels: list[KernelProfile] = field(default_factory=list)
    sm_count: Optional[int] = None
    findings: list[str] = field(default_factory=list)
    note: str = ""  # why the fallback ran instead of ncu
    seconds: float = 0.0  # what the profile cost, wall clock
