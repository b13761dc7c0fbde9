"""`harness eval`'s view of its results: the live phase table while candidates run, then one rich panel per
evaluation (its verdict, timings and speedups)."""
from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..degenerate import problem_text
from ..engine.timing.speedups import basis_text, shown
from ..integrity.roofline import roofline_text
from ..results import CLOCK_NAMES, Clock, EvalResult, Verdict, clears, speedup_text, tolerance_text

VERDICT_STYLE = {Verdict.CORRECT: "bold green", Verdict.INCORRECT: "bold red",
                 Verdict.REJECTED: "bold magenta", Verdict.TIMEOUT: "bold yellow"}

TIMING_LABELS = {"candidate": "candidate", "reference": "reference", "compiled": "torch.compile",
                 "reference_defaults": "reference, PyTorch defaults",
                 "compiled_defaults": "torch.compile, PyTorch defaults",
                 "candidate_forward": "candidate, forward alone", "reference_forward": "reference, forward alone"}


def verdict_text(verdict: Verdict) -> Text:
    return Text(verdict.value, style=VERDICT_STYLE.get(verdict, "bold red"))


def timing_table(result: EvalResult) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    # on a CPU the call is the work, so its host time says nothing more
    on_gpu = any(t.on_gpu for t in result.timings.values())
    second = result.second.timings if result.second else {}
    columns = ["", "median ms", "IQR ms", "mean ms", "min ms", "n", "±SE", "vs ref"]
    extra = ([f"{CLOCK_NAMES[Clock(result.second.clock)]} ms"] if second else []) + (["host submit ms"] if on_gpu else [])
    for column in columns + extra:
        table.add_column(column, justify="left" if not column else "right")
    for name, t in result.timings.items():
        # a forward alone (--backward) is set against the reference's forward alone
        base = "reference_forward" if name.endswith("_forward") else "reference"
        reference = result.timings.get(base)
        ratio = f"{reference.median / t.median:.2f}x" if reference and t.median else ""
        row = [TIMING_LABELS.get(name, name), f"{t.median:.4g}", f"{t.iqr:.3g}", f"{t.mean:.4g}",
               f"{t.min:.4g}", str(t.n), f"{t.rel_se:.1%}", ratio if name != base else ""]
        other = [f"{second[name].median:.4g}" if name in second else "-"] if second else []
        table.add_row(*row, *other, *([f"{t.submit_median:.3g}"] if on_gpu else []))
    return table


def second_clock_text(result: EvalResult) -> str:
    """The other clock's headline, apart from the verdict's: its speedup and the two times it divides."""
    second = result.second
    head = second.baselines[0]
    cand = second.timings.get("candidate")
    return (f"{speedup_text(head.speedup, head.interval)} over {head.label} (candidate "
            f"{cand.median:.4g} ms, {head.label} {head.median_ms:.4g} ms; {Clock(second.clock).text})")


def eval_panel(result: EvalResult) -> Panel:
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="dim")
    summary.add_column()
    summary.add_row("verdict", verdict_text(result.verdict))
    if result.problem_degenerate:
        summary.add_row("problem", Text(problem_text(result.problem_degenerate), style="bold yellow"))
    if result.speedup is not None:
        # colored by what its interval is sure of: green clear of 1.5x, red surely slower, else yellow
        high = result.speedup_interval[1] if result.speedup_interval else result.speedup
        style = "bold green" if clears(result.speedup, result.speedup_interval, 1.5) else (
            "red" if high < 1 else "yellow")
        count = len(result.benchmark_shapes)
        over = f", geometric mean over {count} benchmark shapes" if count else ""
        if result.problem_degenerate:
            style, over = "yellow", over + " (means nothing: the problem is degenerate)"
        summary.add_row("speedup", Text(speedup_text(result.speedup, result.speedup_interval) + over, style=style))
    for baseline in shown(result.baselines)[1:] if result.baselines else []:
        summary.add_row("", f"{speedup_text(baseline.speedup, baseline.interval)} over {baseline.label}")
    for i, shape in enumerate(result.benchmark_shapes):
        summary.add_row("" if i else "benchmark", shape.text)
    if result.baselines:
        summary.add_row("basis", basis_text(result))
    if result.second and result.second.baselines:
        summary.add_row(CLOCK_NAMES[Clock(result.second.clock)], second_clock_text(result))
    if result.host_share:
        summary.add_row("host", result.host_share.text)
    if result.build:
        b = result.build
        said = "cached" if b.cached else f"{b.seconds:.1f} s" + ("" if b.ok else " (failed)")
        summary.add_row("build", said + (f"; {b.headers.value} torch headers" if b.headers else ""))
    if result.model_mode:
        summary.add_row("models", f"{result.model_mode} mode" + (" (as constructed, as KernelBench runs them)"
                                                                 if result.model_mode == "train" else ""))
    if result.backward:
        summary.add_row("passes", "forward and backward, checked (outputs and gradients) and timed as one call "
                                  "(--backward)")
    if result.check:
        c = result.check
        tolerance = tolerance_text(result)
        worst = max(c.precision, key=lambda f: f.get("ratio", 0.0), default=None)
        numerics = (f"; against float64 {worst['ratio']:.2g}x eager float32's error (at most {worst['limit']:g}x)"
                    if worst else "")
        summary.add_row("check", f"{c.trials} trial(s), max abs err {c.max_abs_error:.3g}, "
                                 f"max rel err {c.max_rel_error:.3g} (|ref| > atol)"
                                 + (f"; allclose at {tolerance}" if tolerance else "")
                                 + numerics)
    if result.shapes:
        failed = len(result.failed_shapes)
        unchecked = sum(s.passed is None for s in result.shapes)
        summary.add_row("shapes", Text(f"{len(result.shapes) - failed - unchecked} other shape(s) passed, "
                                       f"{failed} failed" + (f", {unchecked} not checked" if unchecked else ""),
                                       style="yellow" if failed else ""))
    if result.not_capturable:
        summary.add_row("graph", Text(f"not capturable: {result.not_capturable}", style="yellow"))
    line = result.roofline
    if line and result.timings:
        summary.add_row("roofline", roofline_text(line))
    env = result.environment
    if env:
        summary.add_row("device", " · ".join(x for x in (env.device_name, env.arch, f"torch {env.torch}") if x))
    summary.add_row("took", f"{result.seconds:.1f} s")
    parts = [summary, Text(""), Text(result.explanation)]
    if result.timings:
        parts += [Text("")] + ([Text(f"Timings at {result.timed_shape}:", style="dim")] if result.benchmark_shapes
                               else []) + [timing_table(result)]
        overhead = next(iter(result.timings.values())).overhead
        if overhead:
            parts.append(Text(f"Each time includes ~{overhead:.3g} ms that the protocol adds to any call, "
                              "measured on an empty call.", style="dim"))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    title = f"{result.candidate}  →  {result.problem.rsplit('/', 1)[-1]}"
    return Panel(Group(*parts), title=title, title_align="left", expand=False)


def print_result(console: Console, result: EvalResult) -> None:
    console.print(eval_panel(result))


def phase_table(candidates: list, phases: list[str]) -> Table:
    """Live view of a batch: each candidate and what it is doing now."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("candidate")
    table.add_column("phase")
    for candidate, phase in zip(candidates, phases):
        done = phase in {v.value for v in Verdict}
        table.add_row(str(candidate), verdict_text(Verdict(phase)) if done else Text(phase, style="cyan"))
    return table
