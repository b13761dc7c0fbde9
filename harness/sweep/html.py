"""`harness report --sweep`: a sweep's results as one self-contained HTML page: fast_p against p
per level, the summary per level, every evaluation, and the failures grouped by verdict. Pure:
records in, text out; the page's parts are pages.py's."""
from __future__ import annotations

from ..pages import PALETTE, Chart, Rule, Series, badge, esc, facts, folded, page, svg_chart, table
from ..results import speedup_text
from .records import PROBLEM_ERROR, SweepRecord
from .summary import (P_MAX, LevelSummary, copy_check, copy_sentences, fast_p_curves, seconds_rows, summarize,
                      summary_rows)


DASHES = {"eager": "", "sure": "2 3", "compile": "8 4"}


def fast_p_chart(records: list[SweepRecord]) -> Chart:
    """One line per level against eager, dotted where the whole interval is above p, dashed against
    torch.compile where it was timed."""
    curves = fast_p_curves(records)
    colors = dict(zip(sorted({c.level for c in curves}), PALETTE * 10))
    series = [Series(c.label, colors[c.level], c.points, dash=DASHES[c.kind], markers=False) for c in curves]
    rules = [Rule(p, "", "#d1d9e0", vertical=True) for p in (1.0, 1.5, 2.0)]  # KernelBench's thresholds
    return Chart(series, rules, [], "p (speedup threshold)", "fast_p: share correct and > p times faster",
                 (0.0, P_MAX), (0.0, 1.02), [0, 0.5, 1, 1.5, 2, 2.5, 3], "{:.0%}")


def _level_table(headers: list[str], rows: list[list[str]]) -> str:
    """A table whose first column names the row (its leading spaces, an indent, kept) and the rest are figures."""
    def label(text: str) -> str:
        return "&emsp;" * ((len(text) - len(text.lstrip())) // 2) + esc(text.lstrip())
    return table(headers, [[label(row[0]), *row[1:]] for row in rows], tuple(range(1, len(headers))))


def _seconds(summaries: list[LevelSummary]) -> str:
    headers, rows = seconds_rows(summaries)
    if not rows:
        return ""
    return (f'<h2>Seconds a candidate</h2><section class="card">{_level_table(headers, rows)}'
            '<p class="note">Medians a candidate, from each record\'s phases; a phase holds its waits for the '
            'device too (a timing waits for this process\'s other work, the previous problem\'s other shapes, and '
            'for the device\'s lock, which the next problem\'s load takes too), so '
            'the candidates\' device sides add up to more than the sweep took.</p></section>')


def _copies(records: list[SweepRecord]) -> str:
    """The copies' check of the harness itself (summary.copy_check), where the sweep has copies."""
    check = copy_check(records)
    if check is None:
        return ""
    kinds = {"wrong": ("bad", "read wrong"), "miss": ("warn", "misses 1.0"), "again": ("warn", "ran again"),
             "fine": ("ok", "all hold")}
    said = "".join(f'<p><span class="badge {kinds[tone][0]}">{kinds[tone][1]}</span> {esc(sentence)}</p>'
                   for sentence, tone in copy_sentences(check))
    return f'<h2>The copies: the harness\'s check of itself</h2><section class="card">{said}</section>'


def _failures(records: list[SweepRecord]) -> str:
    by_verdict: dict[str, list[SweepRecord]] = {}
    for r in records:
        if not r.correct:
            by_verdict.setdefault(r.verdict, []).append(r)
    if not by_verdict:
        return '<p class="note">None: every evaluation was correct.</p>'
    parts = []
    for verdict, failed in sorted(by_verdict.items(), key=lambda item: -len(item[1])):
        rows = [[esc(r.level), esc(r.problem), esc(r.candidate), esc(r.explanation or "-")] for r in failed]
        what = "problem(s) that failed themselves, their candidates not run" if verdict == PROBLEM_ERROR \
            else "evaluation(s)"
        parts.append(folded(f"{verdict.replace('_', ' ')}: {len(failed)} {what}",
                            table(["level", "problem", "candidate", "explanation (its head)"], rows), open_=True))
    return "".join(parts)


def sweep_page(directory: str, records: list[SweepRecord]) -> str:
    """The whole page for the sweep whose results.jsonl in `directory` holds `records`."""
    summaries = summarize(records)
    compiled = any(r.speedup_compile is not None for r in records)
    rows = [[esc(r.level), esc(r.problem), esc(r.candidate), badge(r.verdict),
             esc(speedup_text(r.speedup, r.interval)), esc(r.numerics or "-")]
            + ([esc(speedup_text(r.speedup_compile))] if compiled else []) + [f"{r.seconds:.1f}"]
            for r in sorted(records, key=lambda r: (r.level, r.problem, r.candidate))]
    problems = len({(r.level, r.problem) for r in records})
    correct = sum(r.correct for r in records)
    overview = facts([("results", esc(f"{directory}/results.jsonl")),
                      ("evaluated", esc(f"{len(records)} evaluations of {problems} problems; {correct} correct")),
                      ("basis", esc("speedup over eager PyTorch at the faster of its default float32 settings "
                                    "and IEEE float32 (each evaluation's numerics column), the median of the "
                                    "interleaved timings, 95% bootstrap interval; fast_p counts correct "
                                    "evaluations more than p times faster, beyond the 0.1% resolution; "
                                    "sure fast_1 needs the whole interval above 1"))])
    chart = svg_chart(fast_p_chart(records)) if records else '<p class="note">No evaluation recorded.</p>'
    body = (f"<h1>Sweep</h1><p class=\"sub\">{esc(directory)}</p>"
            f'<section class="card">{overview}</section>' + _copies(records) +
            f'<h2>Summary per level</h2><section class="card">{_level_table(*summary_rows(summaries))}</section>'
            + _seconds(summaries) +
            f'<h2>fast_p against p</h2><section class="card">{chart}</section>'
            f'<h2>Failures by verdict</h2><section class="card">{_failures(records)}</section>'
            f'<h2>Every evaluation</h2><section class="card">'
            + table(["level", "problem", "candidate", "verdict", "speedup [95%]", "numerics"]
                    + (["vs torch.compile"] if compiled else []) + ["seconds"], rows, (4, 6, 7)) + "</section>")
    return page(f"Sweep {directory}", body)
