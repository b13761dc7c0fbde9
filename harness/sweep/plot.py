"""A sweep's fast_p against p, one line per level (dotted: counting only speedups whose 95% interval is
above p; dashed: against torch.compile), as a PNG."""
from __future__ import annotations

from pathlib import Path

from .records import SweepRecord
from .summary import P_MAX, fast_p_curves

LINE_STYLES = {"eager": "-", "sure": ":", "compile": "--"}


def plot_fast_p(records: list[SweepRecord], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 5.0), dpi=100)
    curves = fast_p_curves(records)
    colors = dict(zip(sorted({c.level for c in curves}), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10))
    for curve in curves:
        ax.plot(*zip(*curve.points), LINE_STYLES[curve.kind], color=colors[curve.level], label=curve.label)
    for p in (1.0, 1.5, 2.0):
        ax.axvline(p, color="lightgray", linewidth=0.8)
    ax.set_xlim(0, P_MAX)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p: share correct and more than p times faster")
    ax.set_title("fast_p against p")
    # beside the axes, not over the curves
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
