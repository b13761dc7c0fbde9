"""The pieces of a self-contained HTML page, which `harness report` makes of a run (runs/html.py)
and of a sweep (sweep/html.py): escaping, badges, tables, folding, the page itself, and line charts
drawn as SVG.

The page loads nothing (no network, no script): the styles are inline, the charts are SVG drawn here,
folding is <details>. Candidate code, answers and explanations are untrusted, so every text is
escaped, and the page's Content-Security-Policy forbids scripts besides, so nothing in the data could
run even if it slipped through.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

from .results import Verdict, speedup_text

CSP = "default-src 'none'; style-src 'unsafe-inline'"  # nothing loads, nothing runs

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;margin:0;background:#f6f8fa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 10px}h3{font-size:16px;margin:0}
.sub{color:#59636e;margin:0 0 16px}
section.card,article{background:#fff;border:1px solid #d1d9e0;border-radius:8px;padding:16px;margin:12px 0}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{color:#59636e;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}dt{color:#59636e}dd{margin:0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:13px;font-weight:600;color:#fff}
.ok{background:#1a7f37}.bad{background:#cf222e}.warn{background:#9a6700}.info{background:#0969da}
pre{background:#f6f8fa;border:1px solid #eaeef2;border-radius:6px;padding:8px;overflow:auto;font-size:12.5px;
max-height:480px;margin:6px 0}
details{margin:6px 0}summary{cursor:pointer;color:#0969da}
.diff .add{background:#dafbe1;display:block}.diff .del{background:#ffebe9;display:block}
.diff .hunk{color:#8250df;display:block}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:13px;color:#59636e;margin:4px 0 0}
.legend svg{vertical-align:middle;margin-right:4px}
.note{color:#59636e;font-size:13px}
svg text{font-family:system-ui,sans-serif}
a{color:#0969da;text-decoration:none}
"""

# Verdicts' badges: green for correct, amber where the candidate never ran, red otherwise.
_NOT_RUN = {Verdict.NO_CODE.value, Verdict.COMPILE_ERROR.value}

PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def badge(verdict: str) -> str:
    kind = "ok" if verdict == "correct" else "warn" if verdict in _NOT_RUN else "bad"
    return f'<span class="badge {kind}">{esc(verdict.replace("_", " "))}</span>'


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """An HTML table; `rows` hold HTML already escaped; columns in `numeric` align right."""
    def cell(tag: str, i: int, content: str) -> str:
        return f'<{tag} class="n">{content}</{tag}>' if i in numeric else f"<{tag}>{content}</{tag}>"
    head = "".join(cell("th", i, esc(h)) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def facts(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already escaped; empty values are left out."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs if v) + "</dl>"


def folded(summary: str, content: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{content}</details>"


def pre(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main></body></html>\n")


# --- charts --------------------------------------------------------------------------------------------------


@dataclass
class Series:
    label: str
    color: str
    points: list[tuple[float, float]]
    intervals: list[Optional[Sequence[float]]] = field(default_factory=list)  # by point; None: none
    dash: str = ""  # an SVG stroke-dasharray; "": solid
    markers: bool = True


@dataclass
class Rule:
    """A horizontal (or, with vertical, a vertical) line across the chart, named in the legend (a
    gridline where the label is empty)."""

    value: float
    label: str
    color: str
    dash: str = ""  # an SVG stroke-dasharray
    vertical: bool = False


@dataclass
class Mark:
    """A point with no value (a failed round), drawn on a strip under the axis with its reason."""

    x: float
    label: str
    color: str


@dataclass
class Chart:
    series: list[Series]
    rules: list[Rule] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    x_label: str = ""
    y_label: str = ""
    x_range: Optional[tuple[float, float]] = None  # default: the points' own
    y_range: Optional[tuple[float, float]] = None
    x_ticks: Optional[list[float]] = None
    y_format: str = "{:g}x"
    log: bool = False


WIDTH, HEIGHT = 880, 340
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 14, 48
STRIP = 34  # the failed rounds' strip under the plot area


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) between low and high."""
    span = high - low
    if span <= 0:
        return [low]
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if step * m >= raw)
    first = math.ceil(low / step - 1e-9)
    return [round(i * step, 10) for i in range(first, int(math.floor(high / step + 1e-9)) + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """0.5x, 1x, 2x, 5x, 10x rather than powers of ten."""
    return [t * 10.0 ** e for e in range(-3, 5) for t in (1, 2, 5) if low <= t * 10.0 ** e <= high]


def svg_chart(chart: Chart) -> str:
    """The chart as inline SVG, and its legend as HTML under it (labels never sit on the lines)."""
    frame = _frame(chart)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img">',
             f'<rect x="{LEFT}" y="{TOP}" width="{frame.plot_w}" height="{frame.plot_h}" fill="#fff" '
             'stroke="#d1d9e0"/>',
             *_axes(chart, frame), *_rules(chart, frame), *_series(chart, frame), *_marks(chart, frame), "</svg>"]
    return "".join(parts) + legend(chart)


@dataclass
class _Frame:
    """Where a chart's values land in the SVG: its ranges spread over the plot area."""

    x0: float
    x1: float
    y0: float
    y1: float
    log: bool
    strip: int  # the failed rounds' strip's height; 0 where there are none

    @property
    def plot_w(self) -> int:
        return WIDTH - LEFT - RIGHT

    @property
    def plot_h(self) -> int:
        return HEIGHT - TOP - BOTTOM - self.strip

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * self.plot_w

    def py(self, y: float) -> float:
        if self.log:
            share = (math.log(max(y, self.y0)) - math.log(self.y0)) / (math.log(self.y1) - math.log(self.y0))
        else:
            share = (y - self.y0) / (self.y1 - self.y0)
        return TOP + (1 - min(max(share, 0.0), 1.0)) * self.plot_h


def _frame(chart: Chart) -> _Frame:
    """The chart's ranges: given, else its points', intervals' and rules' with a margin."""
    xs = [x for s in chart.series for x, _ in s.points] + [m.x for m in chart.marks]
    x0, x1 = chart.x_range or ((min(xs) - 0.5, max(xs) + 0.5) if xs else (0.0, 1.0))
    values = [y for s in chart.series for _, y in s.points]
    values += [v for s in chart.series for i in s.intervals if i for v in i]
    values += [r.value for r in chart.rules if not r.vertical]
    if chart.y_range:
        y0, y1 = chart.y_range
    elif chart.log:
        positive = [v for v in values if v > 0] or [1.0]
        y0, y1 = min(positive) / 1.4, max(positive) * 1.4
    else:
        y0, y1 = 0.0, (max(values) if values else 1.0) * 1.12
    return _Frame(x0, x1, y0, y1, chart.log, STRIP if chart.marks else 0)


def _axes(chart: Chart, f: _Frame) -> Iterator[str]:
    """The gridlines with the y ticks' labels, the x ticks' labels and both axes' names."""
    for t in log_ticks(f.y0, f.y1) if chart.log else nice_ticks(f.y0, f.y1):
        yield (f'<line x1="{LEFT}" x2="{LEFT + f.plot_w}" y1="{f.py(t):.1f}" y2="{f.py(t):.1f}" '
               f'stroke="#eaeef2"/><text x="{LEFT - 6}" y="{f.py(t) + 4:.1f}" font-size="12" '
               f'text-anchor="end" fill="#59636e">{esc(chart.y_format.format(t))}</text>')
    base = HEIGHT - BOTTOM
    for t in chart.x_ticks if chart.x_ticks is not None else nice_ticks(f.x0, f.x1):
        yield (f'<text x="{f.px(t):.1f}" y="{base + 16}" font-size="12" text-anchor="middle" '
               f'fill="#59636e">{t:g}</text>')
    yield (f'<text x="{LEFT + f.plot_w / 2:.1f}" y="{HEIGHT - 8}" font-size="13" text-anchor="middle" '
           f'fill="#1f2328">{esc(chart.x_label)}</text>')
    yield (f'<text transform="translate(16 {TOP + f.plot_h / 2:.1f}) rotate(-90)" font-size="13" '
           f'text-anchor="middle" fill="#1f2328">{esc(chart.y_label)}</text>')


def _rules(chart: Chart, f: _Frame) -> Iterator[str]:
    """Each rule as a line across the plot area (a horizontal one only where its value is in range)."""
    for r in chart.rules:
        if r.vertical:
            x = f.px(r.value)
            yield (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + f.plot_h}" stroke="{r.color}" '
                   f'stroke-dasharray="{r.dash}"><title>{esc(r.label)}</title></line>')
        elif f.y0 <= r.value <= f.y1:
            y = f.py(r.value)
            yield (f'<line x1="{LEFT}" x2="{LEFT + f.plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{r.color}" '
                   f'stroke-width="1.5" stroke-dasharray="{r.dash}"><title>{esc(r.label)}</title></line>')


def _series(chart: Chart, f: _Frame) -> Iterator[str]:
    """Each series' line, its points' interval bars and its markers (their values in the tooltip)."""
    for s in chart.series:
        if len(s.points) > 1:
            path = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in s.points)
            yield (f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"'
                   + (f' stroke-dasharray="{s.dash}"' if s.dash else "") + "/>")
        for i, (x, y) in enumerate(s.points):
            interval = s.intervals[i] if i < len(s.intervals) else None
            if interval:
                lo, hi = f.py(interval[0]), f.py(interval[1])
                yield (f'<path d="M{f.px(x):.1f} {lo:.1f}V{hi:.1f}M{f.px(x) - 5:.1f} {lo:.1f}h10'
                       f'M{f.px(x) - 5:.1f} {hi:.1f}h10" stroke="{s.color}" stroke-width="1.5" fill="none"/>')
            if s.markers:
                text = speedup_text(y, interval) if chart.y_format.endswith("x") else chart.y_format.format(y)
                yield (f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="4.5" fill="{s.color}">'
                       f'<title>{esc(s.label)}: {x:g}: {esc(text)}</title></circle>')


def _marks(chart: Chart, f: _Frame) -> Iterator[str]:
    """The failed points on their strip under the plot area."""
    if not chart.marks:
        return
    y = TOP + f.plot_h + f.strip / 2 - 2
    yield f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#59636e">failed</text>'
    # room for "runtime error" under each: else the tooltip and the rounds' table say it
    labelled = f.plot_w / (f.x1 - f.x0) >= 72
    for m in chart.marks:
        x = f.px(m.x)
        yield (f'<path d="M{x - 5:.1f} {y - 5:.1f}l10 10m0 -10l-10 10" stroke="{m.color}" '
               f'stroke-width="2"><title>{esc(m.label)}</title></path>')
        if labelled:
            yield (f'<text x="{x:.1f}" y="{y + 17:.1f}" font-size="10" text-anchor="middle" '
                   f'fill="{m.color}">{esc(m.label)}</text>')


def legend(chart: Chart) -> str:
    def swatch(color: str, dash: str = "", dot: bool = False) -> str:
        return (f'<svg width="28" height="10"><line x1="0" x2="28" y1="5" y2="5" stroke="{color}" stroke-width="2"'
                + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
                + (f'<circle cx="14" cy="5" r="3.5" fill="{color}"/>' if dot else "") + "</svg>")
    items = [swatch(s.color, s.dash, s.markers) + esc(s.label) for s in chart.series]
    items += [swatch(r.color, r.dash) + esc(r.label) for r in chart.rules if r.label]
    if any(s.intervals and any(s.intervals) for s in chart.series):
        items.append("bars: 95% interval")
    return '<div class="legend">' + "".join(f"<span>{i}</span>" for i in items) + "</div>"
