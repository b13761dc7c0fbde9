"""`harness profile`'s view: one row per kernel, the findings under the table; on a CPU, perf's
samples of the calls by function and source line."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..engine.profiling.ncu import TOOL_NAMES, dims_text, occupancy_text, pct_text, short_name
from ..loop.profile_text import function_rows, line_rows, no_lines, sampling_summary
from ..profiles import KernelProfile, Profile, Sampling


COLUMNS = ("kernel", "grid", "block", "time", "regs", "smem", "occ (theor.)", "DRAM", "SM", "L2 hit", "top stalls",
           "bound")


def kernel_row(k: KernelProfile) -> list[str]:
    return [short_name(k.name), dims_text(k.grid), dims_text(k.block), f"{k.duration_us:,.1f} us",
            "" if k.registers is None else str(k.registers),
            "" if k.shared_mem_bytes is None else f"{k.shared_mem_bytes:,} B", occupancy_text(k),
            pct_text(k.dram_pct), pct_text(k.sm_pct), pct_text(k.l2_hit_pct),
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


def rows_table(columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    for i, name in enumerate(columns):
        table.add_column(name, overflow="fold", no_wrap=i == 0)
    for r in rows:
        table.add_row(*(Text(cell) for cell in r))  # a name such as [vdso] is no markup
    return table


def print_sampling(console: Console, sampling: Sampling) -> None:
    console.print(sampling_summary(sampling), markup=False, highlight=False)
    if sampling.note or not sampling.samples:
        return
    console.print(rows_table(("function", "library", "samples"), function_rows(sampling)))
    if sampling.lines:
        console.print("The extension's most sampled source lines:")
        console.print(rows_table(("line", "samples", "source"), line_rows(sampling)))
    elif no_lines(sampling):
        console.print(no_lines(sampling), markup=False, highlight=False)


def print_profile(console: Console, profile: Profile, what: str) -> None:
    if profile.note:
        console.print(f"[yellow]{profile.note}[/yellow]")
    tool = TOOL_NAMES[profile.tool]
    console.print(profile_table(profile.kernels, f"{what}: {len(profile.kernels)} kernel(s), {tool}, "
                                         f"{profile.seconds:.1f} s to profile"))
    for line in profile.findings:
        console.print(f"  - {line}", markup=False, highlight=False)
    if profile.sampling:
        print_sampling(console, profile.sampling)
