"""`harness report`: a run as one self-contained HTML page. Pure: records in, text out; the
page's pieces (escaping, tables, folding, the SVG chart) are pages.py's.
"""
from __future__ import annotations

import difflib
from typing import Optional

from ..engine.timing.speedups import basis_text
from ..pages import PALETTE, Chart, Mark, Rule, Series, badge, esc, facts, folded, page, pre, svg_chart, table
from ..results import EvalResult, speedup_text
from .plot import failed_text, use_log_scale
from .records import Round, Run, Sample
from .settings import cost_usd


BREAK = ' <span class="badge bad">break</span>'  # a round whose candidate broke the judge (--red-team)


def _breaks(rounds: list[Round]) -> str:
    """The rounds that broke the judge, each a link to its own."""
    broken = [f'<a href="#round-{r.n}">round {r.n}</a>' for r in rounds if r.broke]
    return (f"{len(broken)} of {len(rounds)} round(s): " + ", ".join(broken) + esc(" (each kept under breaks/ in "
            "the run)")) if broken else esc(f"none in {len(rounds)} round(s): the judge held")


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
        ("audit", esc(sample.audit.text + (f": {sample.audit.why}" if sample.audit.why else "")) + BREAK * sample.broke
         if sample.audit else ""),
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
            + (' <span class="badge info">best</span>' if best else "") + BREAK * rnd.broke
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
    asked = bool(run.tokens.total)  # a model was asked: its tokens, and what they cost
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
        ("tokens", esc(f"{run.tokens.total} (prompt {run.tokens.prompt}, completion {run.tokens.completion})")
         if asked else ""),
        ("cost", esc(_usd(cost)) if cost is not None else ""),
        ("evaluation", esc(", ".join(f"{k} {v}" for k, v in vars(run.evaluation).items()
                                     if v not in (None, False) and not (k == "clock" and s.device == "cpu")))
         if run.evaluation else ""),
        ("started", esc(run.created)),
        ("breaks", _breaks(rounds) if s.red_team else ""),
    ])
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in run.notes)
    if damage:
        notes += f'<p class="note">The run directory is damaged: {esc(damage)}</p>'
    noted = any(rnd.sample.approach for rnd in rounds)
    columns = (["round", "verdict", "speedup [95%]", "candidate ms", "reference ms", "build"]
               + ["tokens", "cost"] * asked + ["seconds"] + ["audit"] * s.red_team + ["note"] * noted)
    rows = []
    for rnd in rounds:
        r = rnd.eval
        star = " ★" if best is not None and best.round == rnd.n else ""
        rows.append([f'<a href="#round-{rnd.n}">{rnd.n}</a>{star}', badge(r.verdict.value),
                     esc(speedup_text(r.speedup, r.speedup_interval)), _ms(r, "candidate"), _ms(r, "reference"),
                     esc(_build(r))] + [str(rnd.tokens.total), esc(_usd(cost_usd(rnd.tokens, s.prices)))] * asked
                    + [f"{rnd.seconds:.1f}"] + [esc(rnd.audit_text) + BREAK * rnd.broke] * s.red_team
                    + [esc(rnd.sample.approach)] * noted)
    chart = svg_chart(run_chart(run, rounds)) if rounds else '<p class="note">No round finished.</p>'
    basis = next((basis_text(r.eval, each_round=True) for r in rounds if r.eval.speedup is not None), "")
    body = (f"<h1>{esc(run.problem.name)}</h1><p class=\"sub\">run {esc(run.id)}</p>"
            f'<section class="card">{summary}{notes}</section>'
            f'<h2>Speedup per round</h2><section class="card">{chart}'
            + (f'<p class="note">Speedup over the reference: {esc(basis)}.</p>' if basis else "") + "</section>"
            f'<h2>Rounds</h2><section class="card">'
            + table(columns, rows, tuple(range(2, len(columns) - noted - s.red_team))) + "</section>"
            + "".join(_round_html(run, rounds, rnd) for rnd in rounds))
    return page(f"{run.problem.name}: run {run.id}", body)
