"""A bench's fast_p against p, one line per level (dashed: against torch.compile), as a PNG."""
from __future__ import annotations

from pathlib import Path

from .records import NOT_EVALUATED, BenchRecord
from .summary import fast_p

P_MAX, P_STEPS = 3.0, 121


def plot_fast_p(records: list[BenchRecord], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: the plot only goes to a file
    import matplotlib.pyplot as plt

    ps = [P_MAX * i / (P_STEPS - 1) for i in range(P_STEPS)]
    fig, ax = plt.subplots(figsize=(8.0, 5.0), dpi=100)
    levels = sorted({r.level for r in records})
    for level, color in zip(levels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10):
        evaluated = [r for r in records if r.level == level and r.verdict not in NOT_EVALUATED]
        eager = [r.speedup if r.correct else None for r in evaluated]
        ax.plot(ps, [fast_p(eager, p) for p in ps], "-", color=color, label=f"{level} vs eager")
        compiled = [r.speedup_compile if r.correct else None for r in evaluated]
        if any(s is not None for s in compiled):
            ax.plot(ps, [fast_p(compiled, p) for p in ps], "--", color=color, label=f"{level} vs torch.compile")
    for p in (1.0, 1.5, 2.0):
        ax.axvline(p, color="lightgray", linewidth=0.8)
    ax.set_xlim(0, P_MAX)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p: share correct and more than p times faster")
    ax.set_title("fast_p against p")
    ax.legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
