"""The pair study's figures: a pair's token-pair attributions, their convergence, and topology against similarity."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlens.render.figures.canvas import save_figure


def plot_pair_matrix(matrix: np.ndarray, tokens_a, tokens_b, stem, title: str, dpi: int = 150) -> list[Path]:
    """Token × token pair attribution: text a down the rows, text b along the columns, diverging colours at 0."""
    n_a, n_b = matrix.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 0.28 * n_b + 2.5), max(4.0, 0.28 * n_a + 1.5)))
    bound = float(np.abs(matrix).max()) or 1.0
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest", aspect="auto")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attribution A[i, j]")
    ax.set_yticks(range(n_a), list(tokens_a), fontsize=7)
    ax.set_xticks(range(n_b), list(tokens_b), fontsize=7, rotation=90)
    ax.set_ylabel("text a")
    ax.set_xlabel("text b")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_pair_convergence(frame: pd.DataFrame, stem, dpi: int = 150) -> list[Path]:
    """|attribution error| against the number of steps, log-log, one line per model, similarity, mode and rule."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    styles = {"gauss_legendre": "-", "midpoint": "--", "right_riemann": ":"}
    colours = plt.get_cmap("tab10")
    keys = list(dict.fromkeys(zip(frame["model"], frame["similarity"], strict=True)))
    floor = np.finfo(np.float32).eps
    for k, (model, sim) in enumerate(keys):
        mine = frame[(frame["model"] == model) & (frame["similarity"] == sim)]
        for (mode, rule), part in mine.groupby(["mode", "quadrature"]):
            part = part.sort_values("n_steps")
            rel = np.maximum(np.abs(part["error"]) / np.maximum(np.abs(part["target"]), floor), floor)
            legacy = " (legacy)" if mode == "legacy" else ""
            ax.loglog(
                part["n_steps"],
                rel,
                styles.get(rule, "-."),
                marker="o",
                ms=3,
                color=colours(k),
                label=f"{model} {sim}, {rule.replace('_', '-')}{legacy}",
            )
    ax.set_xlabel("integration steps N")
    ax.set_ylabel("|ΣA − target| / |target|")
    ax.set_title(f"attribution error against N (pair {frame['pair_id'].iloc[0]})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_pair_topology(frame: pd.DataFrame, estimator: str, dim: str, stem, dpi: int = 150) -> list[Path]:
    """Bottleneck distance of each pair's attention diagrams against the encoder's cosine, coloured by gold score."""
    part = frame[(frame["estimator"] == estimator) & (frame["dim"] == dim)]
    fig, ax = plt.subplots(figsize=(6.0, 4.5))
    image = ax.scatter(part["cosine"], part["bottleneck"], c=part["gold"], cmap="viridis", s=22)
    fig.colorbar(image, ax=ax, label="gold similarity")
    ax.set_xlabel("encoder cosine similarity")
    ax.set_ylabel(f"bottleneck distance (H{dim})" if dim != "max" else "bottleneck distance (max of H0, H1)")
    ax.set_title(f"attention topology against similarity ({estimator})", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)
