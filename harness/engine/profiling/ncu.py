"""Nsight Compute output as profile records (profiles.py), and the plain-language findings drawn from them.

Pure: `parse_raw` reads what `ncu --csv --page raw` wrote (its own messages and
the program's output may come before the CSV header, the line starting "ID";
the second CSV row holds the units; numbers carry thousands separators), and
the rules below turn records into findings. Running the profiler is profile.py's.
"""
from __future__ import annotations

import csv
import re
from typing import Callable, Optional

from ...errors import HarnessError
from ...profiles import KernelProfile, Stall


class ProfileParseError(HarnessError):
    """ncu output that holds no CSV table of kernels."""


# --- parsing --------------------------------------------------------------------------------------------------------

LIMITERS = {"launch__occupancy_limit_registers": "register count", "launch__occupancy_limit_shared_mem": "shared memory",
            "launch__occupancy_limit_warps": "block size", "launch__occupancy_limit_blocks": "blocks per SM",
            "launch__occupancy_limit_barriers": "barriers"}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
TOP_STALLS = 3


def number(text: str) -> Optional[float]:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def dims(text: str) -> Optional[list[int]]:
    found = re.fullmatch(r"\((\d+), (\d+), (\d+)\)", text.strip())
    return [int(g) for g in found.groups()] if found else None


def csv_rows(text: str, where: str) -> list[dict[str, str]]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ProfileParseError(f"{where} holds no ncu CSV table (no header line starting with \"ID\"); "
                                "ncu said: " + " ".join(lines[-5:])[:600])
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    # the second row holds the units; a kernel row starts with its numeric ID
    return [dict(zip(header, row)) for row in rows[1:] if row and row[0].isdigit()]


LAUNCH_US = 5.0  # shorter than this, launching costs about as much as running
BOUND_PCT = 60.0


def classify(k: KernelProfile) -> str:
    """The one-word bottleneck: named, ordered rules."""
    if k.duration_us < LAUNCH_US:
        return "launch"
    if k.dram_pct is not None and k.dram_pct >= BOUND_PCT and k.dram_pct > (k.sm_pct or 0):
        return "memory"
    if k.sm_pct is not None and k.sm_pct >= BOUND_PCT:
        return "compute"
    return "latency" if k.dram_pct is not None else ""


def kernel_from_row(row: dict[str, str]) -> KernelProfile:
    def get(name: str) -> Optional[float]:
        return number(row[name]) if name in row else None

    limits = {label: get(metric) for metric, label in LIMITERS.items() if get(metric) is not None}
    fewest = min(limits.values()) if limits else None
    theoretical = get("sm__maximum_warps_per_active_cycle_pct")
    stalls = sorted((Stall(m[1], v) for name, text in row.items()
                     if (m := STALL.fullmatch(name)) and m[1] != "selected" and (v := number(text))),
                    key=lambda s: -s.cycles)[:TOP_STALLS]
    requests, sectors = get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"), get(
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    conflicts, wavefronts = get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"), get(
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    registers, shared = get("launch__registers_per_thread"), get("launch__shared_mem_per_block")
    k = KernelProfile(
        name=row.get("Kernel Name", "?"), duration_us=(get("gpu__time_duration.sum") or 0.0) / 1000,
        grid=dims(row.get("Grid Size", "")), block=dims(row.get("Block Size", "")),
        registers=None if registers is None else int(registers), shared_mem_bytes=None if shared is None else int(shared),
        achieved_occupancy=get("sm__warps_active.avg.pct_of_peak_sustained_active"), theoretical_occupancy=theoretical,
        occupancy_limiters=[label for label, n in limits.items() if n == fewest]
        if theoretical is not None and theoretical < 100 else [],
        dram_pct=get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        sm_pct=get("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        l2_hit_pct=get("lts__t_sector_op_read_hit_rate.pct"),
        sectors_per_request=sectors / requests if requests and sectors is not None else None,
        bytes_per_sector=get("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio") if requests else None,
        bank_conflict_pct=100 * conflicts / wavefronts if wavefronts and conflicts is not None else None,
        stalls=stalls)
    k.bottleneck = classify(k)
    return k


def parse_raw(text: str, where: str = "ncu's output") -> tuple[list[KernelProfile], Optional[int]]:
    """The kernels of `ncu --csv --page raw` output, in launch order, and the SM count it read."""
    rows = csv_rows(text, where)
    sm_count = next((int(n) for r in rows if (n := number(r.get("launch__sm_count", ""))) is not None), None)
    return [kernel_from_row(r) for r in rows], sm_count


# --- findings -------------------------------------------------------------------------------------------------------

def idle_sms(k: KernelProfile, sm_count: Optional[int]) -> Optional[str]:
    blocks = k.blocks
    if blocks is None or not sm_count or blocks >= sm_count:
        return None
    return f"grid of {blocks} blocks on {sm_count} SMs: {100 * (sm_count - blocks) / sm_count:.0f}% of SMs idle"


UNCOALESCED_BYTES = 16  # of a sector's 32: half of what global loads fetch is thrown away


def uncoalesced(k: KernelProfile, sm_count: Optional[int]) -> Optional[str]:
    if k.bytes_per_sector is None or k.bytes_per_sector >= UNCOALESCED_BYTES:
        return None
    return (f"uncoalesced global loads: {k.sectors_per_request:.1f} sectors per request, "
            f"{k.bytes_per_sector:.0f} of each sector's 32 bytes used")


BANK_CONFLICT_PCT = 10.0


def bank_conflicts(k: KernelProfile, sm_count: Optional[int]) -> Optional[str]:
    if k.bank_conflict_pct is None or k.bank_conflict_pct < BANK_CONFLICT_PCT:
        return None
    return f"bank conflicts in shared memory: {k.bank_conflict_pct:.0f}% of shared-memory wavefronts"


def occupancy_limit(k: KernelProfile, sm_count: Optional[int]) -> Optional[str]:
    if not k.occupancy_limiters:
        return None
    verb = "limits" if len(k.occupancy_limiters) == 1 else "limit"
    return f"{' and '.join(k.occupancy_limiters)} {verb} occupancy to {k.theoretical_occupancy:.0f}%"


def bound(k: KernelProfile, sm_count: Optional[int]) -> Optional[str]:
    if k.bottleneck == "memory":
        return f"DRAM at {k.dram_pct:.0f}% of peak: memory-bound"
    if k.bottleneck == "compute":
        return f"SM throughput at {k.sm_pct:.0f}% of peak: compute-bound"
    if k.bottleneck == "launch":
        return f"{k.duration_us:.1f} us: launch-bound, fuse it with its neighbours"
    if k.bottleneck == "latency":
        top = f"; warps mostly stall on {k.stalls[0].reason}" if k.stalls else ""
        return f"DRAM at {k.dram_pct:.0f}% and SM at {k.sm_pct or 0:.0f}% of peak: latency-bound{top}"
    return None


RULES: tuple[Callable[[KernelProfile, Optional[int]], Optional[str]], ...] = (
    idle_sms, uncoalesced, bank_conflicts, occupancy_limit, bound)


def kernel_findings(k: KernelProfile, sm_count: Optional[int]) -> list[str]:
    return [line for rule in RULES if (line := rule(k, sm_count))]


def short_name(name: str, width: int = 60) -> str:
    """A kernel's name without its parameter list: `void f<float>(const float *, ...)` -> `f<float>`."""
    name = re.sub(r"^void\s+", "", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        depth += ch in "<"
        depth = max(0, depth - (ch in ">"))  # ncu writes an anonymous namespace as "unnamed>"
        if ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return name if len(name) <= width else name[:width - 3] + "..."


TOOL_NAMES = {"ncu": "Nsight Compute", "torch": "torch profiler", "torch-cpu": "torch profiler, CPU ops"}


def dims_text(value: Optional[list[int]]) -> str:
    return "" if value is None else "x".join(str(v) for v in value)


def pct_text(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.0f}%"


def occupancy_text(k: KernelProfile) -> str:
    """Achieved occupancy, and the theoretical in brackets where known."""
    theoretical = f" ({pct_text(k.theoretical_occupancy)})" if k.theoretical_occupancy is not None else ""
    return pct_text(k.achieved_occupancy) + theoretical


def findings(kernels: list[KernelProfile], sm_count: Optional[int]) -> list[str]:
    """Every rule's line, for each kernel that takes most of the time."""
    many = len(heaviest(kernels)) > 1
    return [f"{short_name(k.name, 40)}: {line}" if many else line
            for k in heaviest(kernels) for line in kernel_findings(k, sm_count)]


def heaviest(kernels: list[KernelProfile], share: float = 0.9) -> list[KernelProfile]:
    """The longest kernels that together take `share` of the time, longest first."""
    total = sum(k.duration_us for k in kernels)
    chosen, seen = [], 0.0
    for k in sorted(kernels, key=lambda k: -k.duration_us):
        if chosen and seen >= share * total:
            break
        chosen.append(k)
        seen += k.duration_us
    return chosen
