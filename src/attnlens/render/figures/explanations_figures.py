"""The explanation methods' figures: the faithfulness curves and the leaderboard."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def plot_faithfulness_curves(curves: pd.DataFrame, readout: str = "probability of the explained class"):
    """Mean deletion and insertion curves (± s.e.) per ranking, one panel each, on a symlog fraction axis;
    ``readout``: what the curves measure (the task's ``F``: the ``readout_label`` of :class:`attnlens.tasks.Task`)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, curve in zip(axes, ("deletion", "insertion"), strict=True):
        part = curves[curves["curve"] == curve]
        for name, g in part.groupby("ranking", sort=False):
            stats = g.groupby("fraction")["prob"].agg(["mean", "sem"]).reset_index()
            line = ax.plot(stats["fraction"], stats["mean"], marker="o", ms=3, label=name)[0]
            sem = stats["sem"].fillna(0)
            ax.fill_between(
                stats["fraction"], stats["mean"] - sem, stats["mean"] + sem, color=line.get_color(), alpha=0.15
            )
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel("fraction of non-special tokens " + ("deleted" if curve == "deletion" else "kept"))
        ax.set_title(f"{curve} ({curves['example_id'].nunique()} examples)")
    axes[0].set_ylabel(f"{readout} (mean ± s.e.)")
    axes[1].legend(frameon=False, fontsize=8)
    return fig


def plot_leaderboard(summary: pd.DataFrame, columns, baseline: str):
    """One panel per metric: every method's mean with its bootstrap 95 % interval (chance as a grey bar for
    agreement), methods top to bottom in leaderboard order; a filled marker where the paired test against
    ``baseline`` gives p < 0.05 after Holm's adjustment over the table's tests."""
    methods = list(dict.fromkeys(summary["method"]))
    shown = [m for m in columns if (summary["metric"] == m.name).any()]
    cols = min(4, len(shown))
    rows = -(-len(shown) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 0.32 * len(methods) * rows + 1.2), squeeze=False)
    y_of = {m: len(methods) - 1 - i for i, m in enumerate(methods)}
    for ax, metric in zip(axes.flat, shown, strict=False):
        part = summary[summary["metric"] == metric.name]
        for r in part.itertuples(index=False):
            y = y_of[r.method]
            if metric.group == "agreement" and np.isfinite(r.chance):
                ax.plot([r.chance, r.chance], [y - 0.35, y + 0.35], color="0.6", lw=2)
            if np.isfinite(r.lo):
                ax.plot([r.lo, r.hi], [y, y], color="C0", lw=1.5)
            significant = np.isfinite(r.p_holm) and r.p_holm < 0.05
            colour = "C3" if r.method == baseline else "C0"
            ax.plot([r.mean], [y], "o", color=colour, mfc=colour if significant or r.method == baseline else "white")
        ax.set_yticks(range(len(methods)), methods[::-1], fontsize=8)
        ax.set_title(
            metric.label + ("" if metric.higher_is_better is None else (" ↑" if metric.higher_is_better else " ↓")),
            fontsize=9,
        )
        if metric.name == "cost_ratio":
            ax.set_xscale("log")
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"explanations vs IG: mean and bootstrap 95 % interval ({summary['n'].max()} examples); grey: chance; "
        f"filled: paired Wilcoxon p < 0.05 (Holm-adjusted) against {baseline} (red)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
