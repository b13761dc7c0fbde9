"""`harness plot`: speedup per round of runs of one problem, as a PNG."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..results import Verdict
from .history import HistoryError, load, load_rounds
from .records import Run
from .store import RunStore


@dataclass
class Plot:
    """What `plot` drew, for a caller to check without reading pixels."""

    path: Path
    problem: str
    runs: list[str]
    xlabel: str
    ylabel: str
    size: tuple[int, int]  # pixels, width by height
    log: bool  # a log speedup axis
    legend: list[str]  # the runs, then the lines: accept, target and (where recorded) the ceiling
    bars: int  # rounds drawn with their 95% interval


def use_log_scale(speedups: list[float]) -> bool:
    """A log axis once the values span 10x or more (0.6x to 15x): a linear one squeezes the slow rounds flat."""
    positive = [v for v in speedups if v > 0]
    return bool(positive) and max(positive) / min(positive) >= LOG_SPAN


# Rounds without a speedup sit on a strip under the axis, marked by what went wrong.
_FAILED_MARKERS = {Verdict.INCORRECT: "v", Verdict.COMPILE_ERROR: "s", Verdict.NO_CODE: "_"}


def failed_text(verdict: Verdict) -> str:
    """A failed round's label in a chart: the verdict as the rounds table and run.json name it."""
    return verdict.value


PLOT_FILE = "plot.png"  # in the (first) run's directory, where no -o is given
PLOT_SIZE = (10.0, 5.0)  # inches


PLOT_DPI = 100


LOG_SPAN = 10.0


def plot(runs: list[str], runs_dir: Path, out: Optional[Path] = None) -> Plot:
    """Speedup per round of one or more runs of one problem, with 95% intervals, the accept, target and
    ceiling lines, as a PNG (`out`, else PLOT_FILE in the first run's directory); the names go in a
    legend beside the axes so no label sits on another."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    loaded = [load(run, runs_dir) for run in runs]
    problems = {record.problem.name for _, record in loaded}
    if len(problems) > 1:
        raise HistoryError(f"The runs are of different problems ({', '.join(sorted(problems))}); one chart "
                           "holds runs of one problem, since speedups of different problems do not compare.")
    # the intervals are in each round's eval.json, not in run.json's summaries
    intervals = [{r.n: r.eval.speedup_interval for r in load_rounds(store)[0]} for store, _ in loaded]
    fig, ax = plt.subplots(figsize=PLOT_SIZE, dpi=PLOT_DPI)
    speedups = [r.speedup for _, record in loaded for r in record.rounds if r.speedup is not None]
    ends = [v for by_round in intervals for i in by_round.values() if i for v in i]
    settings = loaded[0][1].settings
    ceiling = min((record.ceiling for _, record in loaded if record.ceiling), default=None)
    lines = [(settings.accept, f"accept {settings.accept:g}x", ":", "#9a6700"),
             (settings.target, f"target {settings.target:g}x", "--", "#1a7f37")]
    if ceiling:
        lines.append((ceiling, f"ceiling {ceiling:.2f}x (the most the hardware allows)", "-", "#cf222e"))
    marks = speedups + ends + [value for value, *_ in lines] + [1.0]
    log = use_log_scale(marks)
    bottom, top, strip = _speedup_axis(ax, marks, log)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10
    drawn_bars = sum(_draw_run(ax, store.id, record, by_round, color, strip)
                     for (store, record), by_round, color in zip(loaded, intervals, colors))
    for value, name, style, color in lines:
        ax.axhline(value, linestyle=style, color=color, linewidth=1.2, label=name)
    ax.axhline(1.0, color="lightgray", linewidth=0.8)
    ax.set_ylim(bottom, top)
    rounds = max((len(record.rounds) for _, record in loaded), default=1)
    ax.set_xticks(range(1, rounds + 1))
    ax.set_xlim(0.5, rounds + 0.5)
    ax.set_xlabel("round")
    ax.set_ylabel("speedup over the reference (log scale)\nfailed rounds at the bottom" if log else
                  "speedup over the reference (x)\nfailed rounds below 0")
    problem = problems.pop()
    ax.set_title(f"{problem}: speedup per round, bars the 95% intervals")
    drawn = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    legend = [t.get_text() for t in drawn.get_texts()]
    fig.tight_layout()
    out = _out_path(out, loaded[0][0])
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return Plot(out, problem, [store.id for store, _ in loaded], "round", ax.get_ylabel(),
                (int(PLOT_SIZE[0] * PLOT_DPI), int(PLOT_SIZE[1] * PLOT_DPI)), log, legend, drawn_bars)


def _speedup_axis(ax, marks: list[float], log: bool) -> tuple[float, float, float]:
    """The speedup axis's bottom and top around `marks`, and the height of the failed rounds' strip."""
    if log:  # 0.6x and 20x both readable; failed rounds on a strip at the bottom
        ax.set_yscale("log")
        top, bottom = max(marks) * 1.8, min(marks) / 3
        strip = bottom * 1.5
        # speedups read as 0.5x, 1x, 2x, 5x, 10x rather than powers of ten
        ticks = [t * 10.0 ** e for e in range(-3, 5) for t in (1, 2, 5) if bottom <= t * 10.0 ** e <= top]
        ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
        ax.minorticks_off()
    else:
        top = max(marks) * 1.15
        strip = -top * 0.06
        bottom = strip * 2.5
    return bottom, top, strip


def _draw_run(ax, run_id: str, record: Run, by_round: dict[int, Optional[list[float]]], color: str,
              strip: float) -> int:
    """One run's speedups with their 95% bars, and its failed rounds on the strip; the bars drawn."""
    drawn = 0
    good = [(r.n, r.speedup) for r in record.rounds if r.speedup is not None]
    if good:
        best = "" if record.best is None else f", best {record.best.speedup:.2f}x in round {record.best.round}"
        ax.plot(*zip(*good), "-o", color=color, label=f"{run_id}{best}")
        bars = [(n, s, by_round[n]) for n, s in good if by_round.get(n)]
        if bars:
            ns, ss, spans = zip(*bars)
            below, above = [s - i[0] for s, i in zip(ss, spans)], [i[1] - s for s, i in zip(ss, spans)]
            ax.errorbar(ns, ss, yerr=[below, above], fmt="none", ecolor=color, capsize=4, linewidth=1.2)
            drawn = len(bars)
    for r in record.rounds:
        if r.speedup is None:
            ax.plot(r.n, strip, _FAILED_MARKERS.get(r.verdict, "x"), color=color, markersize=9)
            # neighbouring labels on two levels, so that long verdicts do not overlap
            ax.annotate(failed_text(r.verdict), (r.n, strip), textcoords="offset points",
                        xytext=(0, -12 - 9 * (r.n % 2)), ha="center", fontsize=7, color=color)
    return drawn


def _out_path(out: Optional[Path], first: RunStore) -> Path:
    """Where the plot goes: `out`, else PLOT_FILE in the first run's directory."""
    out = Path(out) if out is not None else first.path / PLOT_FILE
    if out.is_dir():  # a directory: the plot goes into it, named after the first run
        return out / f"{first.id}.png"
    if not out.suffix:  # matplotlib would add .png: the path returned is the one written
        return out.with_suffix(".png")
    return out
