"""A round's profile as feedback: the kernels that take most of the forward's time, in a
compact table, and the findings; and, once a run, why there is no ncu profile.

Pure: profiles (inside EvalResults) in, lines out.
"""
from __future__ import annotations

from typing import Optional

from ..engine.profiling.ncu import TOOL_NAMES, dims_text, heaviest, occupancy_text, pct_text, short_name
from ..profiles import KernelProfile, Profile
from ..results import EvalResult

COLUMNS = ("kernel", "grid", "block", "ms", "regs", "occupancy", "DRAM / SM", "class")


def kernel_row(k: KernelProfile) -> list[str]:
    throughput = f"{pct_text(k.dram_pct)} / {pct_text(k.sm_pct)}" if k.dram_pct is not None else ""
    return [short_name(k.name).replace("|", "/"), dims_text(k.grid), dims_text(k.block),
            f"{k.duration_us / 1000:.4g}", "" if k.registers is None else str(k.registers), occupancy_text(k),
            throughput, k.bottleneck]


def kernel_table(kernels: list[KernelProfile]) -> list[str]:
    """A markdown table, longest first, without the columns no kernel fills (the torch fallback's)."""
    rows = [kernel_row(k) for k in kernels]
    keep = [i for i, name in enumerate(COLUMNS) if name in ("kernel", "ms") or any(r[i] for r in rows)]
    return ["| " + " | ".join(COLUMNS[i] for i in keep) + " |", "|" + " --- |" * len(keep),
            *("| " + " | ".join(r[i] for i in keep) + " |" for r in rows)]


def profile_lines(profile: Optional[Profile]) -> list[str]:
    """The feedback's profile block; nothing without a profile."""
    if profile is None:
        return []
    if profile.tool not in TOOL_NAMES:  # the profile failed: its note says how
        return [f"Profile: {profile.note}"]
    if not profile.kernels:
        return [f"Profile ({TOOL_NAMES[profile.tool]}): no kernel ran in the profiled forward."]
    shown = heaviest(profile.kernels)
    unit = "ops (self time)" if profile.tool == "torch-cpu" else "kernels"
    lines = [f"Profile of one forward ({TOOL_NAMES[profile.tool]}): the {unit} that take 90% of its time"
             f" ({len(shown)} of {len(profile.kernels)}):", *kernel_table(shown)]
    hidden = len(profile.kernels) - len(shown)
    if hidden:
        rest_us = sum(k.duration_us for k in profile.kernels) - sum(k.duration_us for k in shown)
        lines.append(f"({hidden} more, {rest_us / 1000:.3g} ms in all, not shown)")
    if profile.findings:
        lines += ["", "Findings:", *(f"- {line}" for line in profile.findings)]
    return lines


def fallback_note(results: list[EvalResult], earlier: list[EvalResult]) -> str:
    """Why the profiles are the torch profiler's, where `results` (a round's) are the first to say
    it: a run says it once, in the display and in the feedback, however many rounds it holds."""
    said = {r.profile.note for r in earlier if r.profile}
    notes = [r.profile.note for r in results
             if r.profile and r.profile.tool in TOOL_NAMES and r.profile.note and r.profile.note not in said]
    return notes[0] if notes else ""
