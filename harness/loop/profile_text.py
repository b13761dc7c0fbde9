"""A round's profile as feedback: the kernels that take most of the forward's time, in a
compact table, and the findings; on a CPU, perf's samples of the calls by function and
source line; and, once a run, why there is no ncu profile.

Pure: profiles (inside EvalResults) in, lines out.
"""
from __future__ import annotations

from typing import Optional

from ..engine.profiling.ncu import TOOL_NAMES, dims_text, heaviest, occupancy_text, pct_text, short_name
from ..profiles import Group, KernelProfile, Profile, Sampling
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
    sampled = ["", *sampling_lines(profile.sampling)] if profile.sampling else []
    if not profile.kernels:
        return [f"Profile ({TOOL_NAMES[profile.tool]}): no kernel ran in the profiled forward.", *sampled]
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
    return lines + sampled


GROUP_NAMES = {Group.EXTENSION: "the candidate's extension", Group.TORCH: "libtorch", Group.PYTHON: "Python",
               Group.KERNEL: "the kernel", Group.OTHER: "other libraries"}
SHOWN_FUNCTIONS, SHOWN_LINES, SYMBOL_CHARS = 10, 8, 70


def symbol_text(name: str, width: int = SYMBOL_CHARS) -> str:
    """A C++ name short enough for a table: where too long, its template arguments collapsed, then cut."""
    if len(name) > width:
        depth, kept = 0, []
        for ch in name:
            if ch == "<":
                kept += [] if depth else ["<...>"]
                depth += 1
            elif ch == ">" and depth:
                depth -= 1
            elif not depth:
                kept.append(ch)
        name = "".join(kept)
    return (name if len(name) <= width else name[:width - 3] + "...").replace("|", "/")


def share_text(samples: int, total: int) -> str:
    share = 100 * samples / total if total else 0.0
    return "" if not total else "<1%" if 0 < share < 0.5 else f"{share:.0f}%"


def sampling_summary(s: Sampling) -> str:
    """One sentence: what perf sampled and each group's share, most first; or why nothing was sampled."""
    if s.note:
        return s.note
    groups = ", ".join(f"{share_text(g.samples, s.samples)} in {GROUP_NAMES[g.group]}"
                       + (f" ({', '.join(g.libraries)})" if g.group in (Group.EXTENSION, Group.OTHER) else "")
                       for g in s.groups)
    threads = f", {s.threads} thread{'s' if s.threads != 1 else ''}" if s.threads else ""
    return (f"Sampled by perf over {s.calls:,} calls ({s.seconds:.2f} s{threads}, {s.samples:,} samples at "
            f"{s.frequency} Hz): {groups}.")


def function_rows(s: Sampling) -> list[list[str]]:
    """function, library, share of the samples: the most sampled first."""
    return [[symbol_text(f.symbol), f.library, share_text(f.samples, s.samples)]
            for f in s.functions[:SHOWN_FUNCTIONS]]


def line_rows(s: Sampling) -> list[list[str]]:
    """file:line, share of the samples, the line's source."""
    return [[f"{line.file}:{line.line}", share_text(line.samples, s.samples), line.text]
            for line in s.lines[:SHOWN_LINES]]


def no_lines(s: Sampling) -> str:
    """Why the extension's samples have no source lines; "" where they have or there are none."""
    if s.lines or not any(g.group is Group.EXTENSION for g in s.groups):
        return ""
    return "No source lines: the extension was built without debug information (-g)."


def sampling_lines(s: Sampling) -> list[str]:
    """perf's samples as markdown: the summary sentence, the functions, the extension's lines."""
    lines = [sampling_summary(s)]
    if s.note or not s.samples:
        return lines
    shown = function_rows(s)
    lines += ["| function | library | samples |", "| --- | --- | --- |", *(f"| {' | '.join(r)} |" for r in shown)]
    rest = s.samples - sum(f.samples for f in s.functions[:len(shown)])
    if rest > 0:
        lines.append(f"({share_text(rest, s.samples)} of the samples in other functions, not shown)")
    if s.lines:
        lines += ["", "The extension's most sampled source lines:", "| line | samples | source |", "| --- | --- | --- |",
                  *(f"| {where} | {share} | `{text.replace('|', '/')}` |" for where, share, text in line_rows(s))]
    elif no_lines(s):
        lines.append(no_lines(s))
    return lines


def fallback_note(results: list[EvalResult], earlier: list[EvalResult]) -> str:
    """Why the profiles are the torch profiler's, where `results` (a round's) are the first to say
    it: a run says it once, in the display and in the feedback, however many rounds it holds."""
    said = {r.profile.note for r in earlier if r.profile}
    notes = [r.profile.note for r in results
             if r.profile and r.profile.tool in TOOL_NAMES and r.profile.note and r.profile.note not in said]
    return notes[0] if notes else ""
