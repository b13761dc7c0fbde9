"""`harness profile`'s view: one row per kernel, the findings under the table."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from ..engine.ncu import KernelProfile, Profile, short_name


def _pct(value) -> str:
    return "" if value is None else f"{value:.0f}%"


def _dims(value) -> str:
    return "" if value is None else "x".join(str(v) for v in value)


COLUMNS = ("kernel", "grid", "block", "time", "regs", "smem", "occ (theor.)", "DRAM", "SM", "L2 hit", "top stalls",
           "bound")


def kernel_row(k: KernelProfile) -> list[str]:
    occupancy = _pct(k.achieved_occupancy) + (f" ({_pct(k.theoretical_occupancy)})"
                                              if k.theoretical_occupancy is not None else "")
    return [short_name(k.name), _dims(k.grid), _dims(k.block), f"{k.duration_us:,.1f} us",
            "" if k.registers is None else str(k.registers),
            "" if k.shared_mem_bytes is None else f"{k.shared_mem_bytes:,} B", occupancy,
            _pct(k.dram_pct), _pct(k.sm_pct), _pct(k.l2_hit_pct),
            ", ".join(f"{s.reason} {s.cycles:.1f}" for s in k.stalls), k.bottleneck]


def profile_table(kernels: list[KernelProfile], title: str) -> Table:
    """Longest first; columns the profiler could not fill (the torch fallback's) are left out."""
    rows = [kernel_row(k) for k in sorted(kernels, key=lambda k: -k.duration_us)]
    keep = [i for i, name in enumerate(COLUMNS) if name in ("kernel", "time") or any(r[i] for r in rows)]
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for i in keep:
        table.add_column(COLUMNS[i], overflow="fold", no_wrap=i == 0)
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def print_profile(console: Console, profile: Profile, what: str) -> None:
    if profile.note:
        console.print(f"[yellow]{profile.note}[/yellow]")
    tool = {"ncu": "Nsight Compute", "torch": "torch profiler", "torch-cpu": "torch profiler, CPU ops"}[profile.tool]
    console.print(profile_table(profile.kernels, f"{what}: {len(profile.kernels)} kernel(s), {tool}, "
                                         f"{profile.seconds:.1f} s to profile"))
    for line in profile.findings:
        console.print(f"  - {line}", markup=False, highlight=False)
