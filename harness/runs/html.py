"""`harness report`: a run as one self-contained HTML page, and the pieces a sweep's page shares.

Pure: records in, text out. The page loads nothing (no network, no script): the styles are
inline, the charts are SVG drawn here, folding is <details>. Candidate code, answers and
explanations are untrusted, so every text is escaped, and the page's Content-Security-Policy
forbids scripts besides, so nothing in the data could run even if it slipped through.
"""
from __future__ import annotations

import difflib
import html
import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..engine.timing.speedups import basis_text
from ..results import EvalResult, Verdict, speedup_text
from .plot import failed_text, use_log_scale
from .settings import cost_usd
from .store import Round, Run, Sample

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
    strip = STRIP if chart.marks else 0
    plot_h = HEIGHT - TOP - BOTTOM - strip
    plot_w = WIDTH - LEFT - RIGHT

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        if chart.log:
            share = (math.log(max(y, y0)) - math.log(y0)) / (math.log(y1) - math.log(y0))
        else:
            share = (y - y0) / (y1 - y0)
        return TOP + (1 - min(max(share, 0.0), 1.0)) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img">',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#d1d9e0"/>']
    y_ticks = log_ticks(y0, y1) if chart.log else nice_ticks(y0, y1)
    for t in y_ticks:
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#eaeef2"/>'
                     f'<text x="{LEFT - 6}" y="{py(t) + 4:.1f}" font-size="12" text-anchor="end" fill="#59636e">'
                     f'{esc(chart.y_format.format(t))}</text>')
    x_ticks = chart.x_ticks if chart.x_ticks is not None else nice_ticks(x0, x1)
    base = HEIGHT - BOTTOM
    for t in x_ticks:
        parts.append(f'<text x="{px(t):.1f}" y="{base + 16}" font-size="12" text-anchor="middle" fill="#59636e">'
                     f'{t:g}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" font-size="13" text-anchor="middle" '
                 f'fill="#1f2328">{esc(chart.x_label)}</text>')
    parts.append(f'<text transform="translate(16 {TOP + plot_h / 2:.1f}) rotate(-90)" font-size="13" '
                 f'text-anchor="middle" fill="#1f2328">{esc(chart.y_label)}</text>')
    for r in chart.rules:
        if r.vertical:
            x = px(r.value)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="{r.color}" '
                         f'stroke-dasharray="{r.dash}"><title>{esc(r.label)}</title></line>')
        elif y0 <= r.value <= y1:
            y = py(r.value)
            parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{r.color}" '
                         f'stroke-width="1.5" stroke-dasharray="{r.dash}"><title>{esc(r.label)}</title></line>')
    for s in chart.series:
        if len(s.points) > 1:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"'
                         + (f' stroke-dasharray="{s.dash}"' if s.dash else "") + "/>")
        for i, (x, y) in enumerate(s.points):
            interval = s.intervals[i] if i < len(s.intervals) else None
            if interval:
                lo, hi = py(interval[0]), py(interval[1])
                parts.append(f'<path d="M{px(x):.1f} {lo:.1f}V{hi:.1f}M{px(x) - 5:.1f} {lo:.1f}h10'
                             f'M{px(x) - 5:.1f} {hi:.1f}h10" stroke="{s.color}" stroke-width="1.5" fill="none"/>')
            if s.markers:
                text = speedup_text(y, interval) if chart.y_format.endswith("x") else chart.y_format.format(y)
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4.5" fill="{s.color}">'
                             f'<title>{esc(s.label)}: {x:g}: {esc(text)}</title></circle>')
    if chart.marks:
        y = TOP + plot_h + strip / 2 - 2
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
                     'fill="#59636e">failed</text>')
        # room for "runtime error" under each: else the tooltip and the rounds' table say it
        labelled = plot_w / (x1 - x0) >= 72
        for m in chart.marks:
            x = px(m.x)
            parts.append(f'<path d="M{x - 5:.1f} {y - 5:.1f}l10 10m0 -10l-10 10" stroke="{m.color}" '
                         f'stroke-width="2"><title>{esc(m.label)}</title></path>')
            if labelled:
                parts.append(f'<text x="{x:.1f}" y="{y + 17:.1f}" font-size="10" text-anchor="middle" '
                             f'fill="{m.color}">{esc(m.label)}</text>')
    parts.append("</svg>")
    return "".join(parts) + legend(chart)


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


# --- a run ---------------------------------------------------------------------------------------------------


def run_chart(run: Run, rounds: list[Round]) -> Chart:
    """The speedup per round with its interval, the accept, target and ceiling lines, failed rounds on a strip."""
    s = run.settings
    good = [r for r in rounds if r.eval.speedup is not None]
    points = [(float(r.n), r.eval.speedup) for r in good]
    rules = [Rule(1.0, "1x: the reference", "#8c959f", "2 3"),
             Rule(s.accept, f"accept {s.accept:g}x", "#9a6700", "4 4"),
             Rule(s.target, f"target {s.target:g}x", "#1a7f37", "8 4")]
    if run.ceiling:
        rules.append(Rule(run.ceiling, f"ceiling {run.ceiling:.2f}x: the most the hardware allows", "#cf222e"))
    marks = [Mark(r.n, failed_text(r.eval.verdict), "#cf222e")
             for r in rounds if r.eval.speedup is None]
    values = [y for _, y in points] + [v for r in good if r.eval.speedup_interval for v in r.eval.speedup_interval]
    log = use_log_scale(values + [rule.value for rule in rules])
    n = max((r.n for r in rounds), default=1)
    return Chart([Series("speedup of the round's candidate", PALETTE[0], points,
                         [r.eval.speedup_interval for r in good])],
                 rules, marks, "round", "speedup over the reference" + (" (log scale)" if log else ""),
                 (0.5, n + 0.5), None, round_ticks(n), log=log)


def round_ticks(rounds: int) -> list[float]:
    """Every round up to 30; beyond, every 2nd, 5th or 10th... so the labels never run into each other."""
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 1000) if rounds / s <= 30)
    return [1.0] + [float(n) for n in range(step, rounds + 1, step) if n > 1]


def _ms(result: EvalResult, key: str) -> str:
    t = result.timings.get(key)
    return f"{t.median:.4g}" if t else "-"


def _build(result: EvalResult) -> str:
    b = result.build
    if b is None:
        return "-"
    return "cached" if b.cached else f"{b.seconds:.1f} s" + ("" if b.ok else " (failed)")


def _usd(value: Optional[float]) -> str:
    return "-" if value is None else f"${value:.4f}"


def parent_of(rounds: list[Round], rnd: Round, sample: Sample) -> Optional[tuple[int, int]]:
    """(round, sample) of the candidate this one was derived from: the parent it was given (--beam); for a
    round that restarted from the best, the best before it; else the latest earlier candidate."""
    if sample.parent is not None:
        return sample.parent.round, sample.parent.sample
    earlier = [r for r in rounds if r.n < rnd.n]
    if rnd.fresh:
        correct = [(s.eval.speedup, r.n, i) for r in earlier for i, s in enumerate(r.samples)
                   if s.eval.speedup is not None and s.candidate]
        if correct:
            _, n, i = max(correct)
            return n, i
    for r in reversed(earlier):
        if r.candidate:
            return r.n, r.chosen
    return None


def diff_html(before: str, after: str, before_name: str, after_name: str) -> str:
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm=""))
    if not lines:
        return '<p class="note">No change from its parent.</p>'

    def line(i: int, text: str) -> str:
        kind = "hunk" if i < 2 or text.startswith("@@") else "add" if text.startswith("+") else \
            "del" if text.startswith("-") else ""  # lines 0 and 1 name the two files
        return f'<span class="{kind}">{esc(text)}</span>' if kind else esc(text) + "\n"
    return '<pre class="diff">' + "".join(line(i, t) for i, t in enumerate(lines)) + "</pre>"


def _profile_html(result: EvalResult) -> str:
    p = result.profile
    if p is None or not (p.findings or p.kernels or p.note):
        return ""
    rows = [[esc(k.name[:90]), f"{k.duration_us:.1f}", esc(k.bottleneck or "-"),
             "-" if k.dram_pct is None else f"{k.dram_pct:.0f}%", "-" if k.sm_pct is None else f"{k.sm_pct:.0f}%"]
            for k in sorted(p.kernels, key=lambda k: -k.duration_us)[:12]]
    body = ("<ul>" + "".join(f"<li>{esc(f)}</li>" for f in p.findings) + "</ul>" if p.findings else "") + \
        (f'<p class="note">{esc(p.note)}</p>' if p.note else "") + \
        (table(["kernel / op", "µs", "bottleneck", "DRAM", "SM"], rows, (1, 3, 4)) if rows else "")
    return folded(f"Profile ({p.tool}): {len(p.findings)} finding(s), {len(p.kernels)} kernel(s)", body,
                  open_=bool(p.findings))


def _sample_html(rounds: list[Round], rnd: Round, index: int) -> str:
    sample = rnd.samples[index]
    result = sample.eval
    lines = [facts([
        ("basis", esc(basis_text(result))),
        ("approach", esc(sample.approach)),
        ("direction", esc(sample.direction)),
        ("same as", f"round {sample.same_as}'s candidate; its verdict repeated" if sample.same_as else ""),
        ("build", esc(_build(result)) if result.build else ""),
        ("tokens", esc(f"{sample.tokens.total} (prompt {sample.tokens.prompt}, completion "
                       f"{sample.tokens.completion})") if sample.tokens.total else ""),
    ]), f"<p>{esc(result.explanation)}</p>" if result.explanation else ""]
    if result.build and result.build.first_errors:
        lines.append(folded("First build errors", pre("\n".join(result.build.first_errors)), open_=True))
    for warning in result.warnings:
        lines.append(f'<p class="note">warning: {esc(warning)}</p>')
    lines.append(_profile_html(result))
    if sample.candidate:
        parent = parent_of(rounds, rnd, sample)
        if parent:
            n, i = parent
            before = rounds[n - 1].samples[i].candidate or ""
            name = f"round {n}" + (f" sample {i + 1}" if len(rounds[n - 1].samples) > 1 else "")
            lines.append(folded(f"Diff against its parent, {name}",
                                diff_html(before, sample.candidate, name, f"round {rnd.n}"), open_=True))
        else:
            lines.append('<p class="note">The run\'s first candidate: no parent to compare with.</p>')
        lines.append(folded("Candidate code", pre(sample.candidate)))
    lines.append(folded("The model's answer", pre(sample.answer)))
    return "".join(lines)


def _round_html(run: Run, rounds: list[Round], rnd: Round) -> str:
    result = rnd.eval
    best = run.best is not None and run.best.round == rnd.n
    head = (f'<h3 id="round-{rnd.n}">Round {rnd.n} {badge(result.verdict.value)} '
            + (esc(speedup_text(result.speedup, result.speedup_interval)) if result.speedup is not None else "")
            + (' <span class="badge info">best</span>' if best else "")
            + (' <span class="badge info">restarted from the best</span>' if rnd.fresh else "") + "</h3>")
    parts = [head, _sample_html(rounds, rnd, rnd.chosen)]
    others = [i for i in range(len(rnd.samples)) if i != rnd.chosen]
    if others:
        rows = [[str(i + 1) + (" (kept)" if i == rnd.chosen else ""), badge(s.eval.verdict.value),
                 esc(speedup_text(s.eval.speedup, s.eval.speedup_interval)), esc(s.direction or "-")]
                for i, s in enumerate(rnd.samples)]
        parts.append(folded(f"All {len(rnd.samples)} samples of this round",
                            table(["sample", "verdict", "speedup", "direction"], rows, (2,))
                            + "".join(folded(f"Sample {i + 1}", _sample_html(rounds, rnd, i)) for i in others)))
    parts.append(folded("The prompt (with the feedback on the round before)", pre(rnd.prompt)))
    return "<article>" + "".join(parts) + "</article>"


def _outcome(run: Run) -> str:
    kind = {"target": "ok", "accepted": "ok", "below_accept": "warn", "no_correct": "bad"}.get(run.outcome, "info")
    text = run.outcome.value.replace("_", " ") if run.outcome else run.status.value
    return f'<span class="badge {kind}">{esc(text)}</span>'


def run_page(run: Run, rounds: list[Round], damage: Optional[str] = None) -> str:
    """The whole page for one run; `damage`: why reading its rounds stopped early, if it did."""
    s = run.settings
    env = run.environment
    best = run.best
    best_interval = None
    if best and best.round <= len(rounds) and best.sample < len(rounds[best.round - 1].samples):
        best_interval = rounds[best.round - 1].samples[best.sample].eval.speedup_interval
    cost = cost_usd(run.tokens, s.prices)
    proposer = s.proposer + (f" ({s.model})" if s.model else "") + (f" at {s.base_url}" if s.base_url else "")
    device = " · ".join(x for x in (env.device_name or env.device, env.arch, f"torch {env.torch}") if x) if env \
        else s.device
    stop = f"stopped by {run.stop_reason.value.replace('_', ' ')}" if run.stop_reason else ""
    summary = facts([
        ("outcome", _outcome(run) + f" {esc(run.status.value)}" + (f", {esc(stop)}" if stop else "")),
        ("message", esc(run.message)),
        ("best", (f'<a href="#round-{best.round}">round {best.round}</a>: '
                  f"{esc(speedup_text(best.speedup, best_interval))}, {esc(best.candidate)}") if best else "none"),
        ("bars", esc(f"accept {s.accept:g}x, target {s.target:g}x")
         + (esc(f", ceiling {run.ceiling:.2f}x (the most the hardware allows)") if run.ceiling else "")),
        ("problem", esc(f"{run.problem.path} (sha256 {run.problem.sha256[:12]})")),
        ("proposer", esc(proposer)),
        ("device", esc(device)),
        ("rounds", esc(f"{len(run.rounds)} of " + (f"{s.rounds}" if s.rounds else "no limit")
                       + (f", {s.samples} sample(s) each" if s.samples > 1 else "")
                       + (f", beam {s.beam}" if s.beam else ""))),
        ("time", esc(f"{run.seconds:.1f} s")),
        ("tokens", esc(f"{run.tokens.total} (prompt {run.tokens.prompt}, completion {run.tokens.completion})")),
        ("cost", esc(_usd(cost)) if cost is not None else ""),
        ("evaluation", esc(", ".join(f"{k} {v}" for k, v in vars(run.evaluation).items() if v not in (None, False)))
         if run.evaluation else ""),
        ("started", esc(run.created)),
    ])
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in run.notes)
    if damage:
        notes += f'<p class="note">The run directory is damaged: {esc(damage)}</p>'
    rows = []
    for rnd in rounds:
        r = rnd.eval
        star = " ★" if best is not None and best.round == rnd.n else ""
        rows.append([f'<a href="#round-{rnd.n}">{rnd.n}</a>{star}', badge(r.verdict.value),
                     esc(speedup_text(r.speedup, r.speedup_interval)), _ms(r, "candidate"), _ms(r, "reference"),
                     esc(_build(r)), str(rnd.tokens.total), esc(_usd(cost_usd(rnd.tokens, s.prices))),
                     f"{rnd.seconds:.1f}"])
    chart = svg_chart(run_chart(run, rounds)) if rounds else '<p class="note">No round finished.</p>'
    basis = next((basis_text(r.eval) for r in rounds if r.eval.speedup is not None), "")
    body = (f"<h1>{esc(run.problem.name)}</h1><p class=\"sub\">run {esc(run.id)}</p>"
            f'<section class="card">{summary}{notes}</section>'
            f'<h2>Speedup per round</h2><section class="card">{chart}'
            + (f'<p class="note">Speedup over the reference: {esc(basis)}.</p>' if basis else "") + "</section>"
            f'<h2>Rounds</h2><section class="card">'
            + table(["round", "verdict", "speedup [95%]", "candidate ms", "reference ms", "build", "tokens", "cost",
                     "seconds"], rows, (2, 3, 4, 5, 6, 7, 8)) + "</section>"
            + "".join(_round_html(run, rounds, rnd) for rnd in rounds))
    return page(f"{run.problem.name}: run {run.id}", body)
