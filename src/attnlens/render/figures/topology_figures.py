"""The topology study's figures: persistence diagrams and the bottleneck distance matrix."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from attnlens.render.figures.canvas import save_figure


def plot_persistence(diagrams: dict[int, np.ndarray], cap: float, stem, title: str, dpi: int = 150) -> list[Path]:
    """Barcode (left) and persistence diagram (right) of one text; capped infinite bars drawn as arrows."""
    colours = plt.get_cmap("tab10")
    fig, (bar_ax, dgm_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    row = 0
    for dim, bars in diagrams.items():
        for birth, death, infinite in bars:
            bar_ax.plot([birth, death], [row, row], color=colours(dim), lw=1.5)
            if infinite:
                bar_ax.annotate(
                    "",
                    (death, row),
                    (death - 0.02 * max(cap, 1e-9), row),
                    arrowprops={"arrowstyle": "->", "color": colours(dim)},
                )
            row += 1
        if len(bars):
            dgm_ax.scatter(
                bars[:, 0],
                bars[:, 1],
                s=14,
                color=colours(dim),
                label=f"H{dim} ({len(bars)})",
                marker="^" if dim else "o",
            )
    bar_ax.set_xlabel("filtration value (MI distance)")
    bar_ax.set_yticks([])
    bar_ax.set_title("barcode")
    lim = max(cap, 1e-9) * 1.05
    dgm_ax.plot([0, lim], [0, lim], color="grey", lw=0.8)
    dgm_ax.axhline(cap, color="grey", ls=":", lw=0.8)
    dgm_ax.set_xlim(-0.02 * lim, lim)
    dgm_ax.set_ylim(-0.02 * lim, lim)
    dgm_ax.set_xlabel("birth")
    dgm_ax.set_ylabel("death (dotted: cap of infinite bars)")
    dgm_ax.legend(loc="lower right", fontsize=8)
    dgm_ax.set_title("persistence diagram")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_distance_matrix(matrix: np.ndarray, labels: np.ndarray, stem, title: str, dpi: int = 150) -> list[Path]:
    """Example × example distance heat-map, examples ordered by class, class boundaries drawn."""
    fig, ax = plt.subplots(figsize=(6.5, 5.6))
    image = ax.imshow(matrix, cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, shrink=0.8, label="bottleneck distance")
    cuts = np.flatnonzero(np.diff(labels)) + 0.5
    for c in cuts:
        ax.axhline(c, color="white", lw=1)
        ax.axvline(c, color="white", lw=1)
    starts = np.r_[0, np.flatnonzero(np.diff(labels)) + 1]
    ends = np.r_[starts[1:], len(labels)]
    ax.set_xticks((starts + ends - 1) / 2, [f"class {labels[s]}" for s in starts])
    ax.set_yticks((starts + ends - 1) / 2, [f"class {labels[s]}" for s in starts])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)
