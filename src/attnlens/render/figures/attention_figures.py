"""Attention's figures: per-head heat-maps, head importance and agreement, top-k counts and their intersections."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlens.render.figures.canvas import SCALES, save_figure


def scale_per_head(images: np.ndarray, scale: str) -> np.ndarray:
    """Map each head's image ``(…, B, B)`` to [0, 1]; NaN cells (no real token) stay NaN.

    ``linear``: min–max per head (the original's per-head scaling, over real cells only);
    ``log``: min–max of ``log10`` with the head's smallest positive value as floor;
    ``rank``: percentile rank of each cell within its head.
    """
    out = np.full(images.shape, np.nan)
    flat_in = images.reshape(-1, images.shape[-2] * images.shape[-1])
    flat_out = out.reshape(flat_in.shape)
    for i, row in enumerate(flat_in):
        ok = np.isfinite(row)
        if not ok.any():
            continue
        v = row[ok].astype(np.float64)
        if scale == "log":
            positive = v[v > 0]
            floor = positive.min() if len(positive) else 1.0
            v = np.log10(np.maximum(v, floor))
        elif scale == "rank":
            from scipy.stats import rankdata  # noqa: PLC0415 (1 s to import: only the rank scale needs it)

            v = (rankdata(v) - 1) / max(len(v) - 1, 1)
        elif scale != "linear":
            raise ValueError(f"unknown scale {scale!r}; expected one of {SCALES}")
        span = v.max() - v.min()
        flat_out[i, ok] = (v - v.min()) / span if span > 0 else 0.0
    return out


def plot_attention_grid(images: np.ndarray, stem, title: str, scale: str = "log", dpi: int = 150) -> list[Path]:
    """Layers × heads grid of attention images ``(L, H, B, B)`` (rows = query bins, columns = key bins).

    Paper Fig 2 / 4a (one example) and Fig 4b (dataset aggregate).
    """
    n_layers, n_heads, b, _ = images.shape
    scaled = scale_per_head(images, scale)
    gap = max(1, b // 16)
    mosaic = np.full((n_layers * (b + gap) - gap, n_heads * (b + gap) - gap), np.nan)
    for layer in range(n_layers):
        for head in range(n_heads):
            r, c = layer * (b + gap), head * (b + gap)
            mosaic[r : r + b, c : c + b] = scaled[layer, head]
    size = min(20.0, max(6.0, 0.9 * max(n_layers, n_heads)))
    fig, ax = plt.subplots(figsize=(size, size * n_layers / n_heads + 0.6))
    cmap = plt.get_cmap("Reds").with_extremes(bad="white")
    ax.imshow(mosaic, cmap=cmap, interpolation="nearest", vmin=0, vmax=1)
    ax.set_xticks([h * (b + gap) + b / 2 for h in range(n_heads)], [str(h + 1) for h in range(n_heads)])
    ax.set_yticks([layer * (b + gap) + b / 2 for layer in range(n_layers)], [str(i + 1) for i in range(n_layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(f"{title}\n(rows: attending query, columns: attended key; {scale} colour scale per head)")
    return save_figure(fig, stem, dpi)


def plot_head_importance(matrices: dict[str, np.ndarray], stem, dpi: int = 150) -> list[Path]:
    """One heat-map per importance matrix (e.g. legacy, fixed, global share), 1-based axes."""
    import seaborn as sns  # noqa: PLC0415 (2 s to import, with scipy.stats: the two heat-map figures only)

    names = list(matrices)
    n_layers, n_heads = next(iter(matrices.values())).shape
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names) + 1, 0.35 * n_layers + 2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        m = np.asarray(matrices[name], dtype=float)
        sns.heatmap(
            m,
            ax=ax,
            cmap="viridis",
            annot=n_layers * n_heads <= 144,
            fmt=".2f",
            annot_kws={"fontsize": 6},
            xticklabels=[str(h + 1) for h in range(n_heads)],
            yticklabels=[str(i + 1) for i in range(n_layers)],
            cbar_kws={"shrink": 0.8},
        )
        ax.set_title(name)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_head_agreement(maps: dict[str, np.ndarray], stem, n_examples: int, dpi: int = 150) -> list[Path]:
    """Layers × heads maps of how far each head's received attention agrees with IG (mean over examples)."""
    import seaborn as sns  # noqa: PLC0415 (2 s to import, with scipy.stats: the two heat-map figures only)

    n_layers, n_heads = next(iter(maps.values())).shape
    fig, axes = plt.subplots(1, len(maps), figsize=(4.6 * len(maps) + 1, 0.35 * n_layers + 2.2), squeeze=False)
    for ax, (name, m) in zip(axes[0], maps.items(), strict=True):
        centred = name.startswith("Spearman")
        lim = float(np.nanmax(np.abs(m))) if centred and np.isfinite(m).any() else None
        sns.heatmap(
            np.asarray(m, dtype=float),
            ax=ax,
            cmap="RdBu_r" if centred else "viridis",
            vmin=-lim if lim else None,
            vmax=lim,
            annot=n_layers * n_heads <= 144,
            fmt=".2f",
            annot_kws={"fontsize": 6},
            xticklabels=[str(h + 1) for h in range(n_heads)],
            yticklabels=[str(i + 1) for i in range(n_layers)],
            cbar_kws={"shrink": 0.8},
        )
        ax.set_title(name)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.suptitle(f"Per-head agreement of received attention with IG attribution (mean over {n_examples} examples)")
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def _labels(table: pd.DataFrame) -> list[str]:
    """``token`` or, for tables by position, ``token (position)``."""
    if "position" not in table:
        return [str(t) for t in table["token"]]
    return [f"{t} ({p})" for t, p in zip(table["token"], table["position"], strict=True)]


def _bars(ax, labels, values, title: str) -> None:
    ax.bar(range(len(values)), values, color="#b2182b")
    ax.set_xticks(range(len(values)), labels, rotation=60, ha="right", fontsize=9)
    ax.set_title(title, fontsize=11)
    ax.set_ylabel("count")


def plot_topk_counts(tables: dict[str, pd.DataFrame], stem, top_n: int, title: str, dpi: int = 150) -> list[Path]:
    """Paper Fig 5 a–d: top attended / attending tokens counted by type and by position."""
    order = [
        ("attended_by_type", "attended tokens (by type)"),
        ("attended_by_position", "attended tokens (by instance)"),
        ("attending_by_type", "attending tokens (by type)"),
        ("attending_by_position", "attending tokens (by instance)"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (key, label) in zip(axes.flat, order, strict=True):
        t = tables[key].head(top_n)
        _bars(ax, _labels(t), t["count"].to_numpy(), f"count of {label}")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_intersections(by_type: pd.DataFrame, by_position: pd.DataFrame, stem, title: str, dpi: int = 150):
    """Paper Fig 7: tokens (a) and positions (b) among both the top attended and top attending."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, table, what in ((axes[0], by_type, "token"), (axes[1], by_position, "position")):
        if table.empty:
            ax.text(0.5, 0.5, "no overlap", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        labels = _labels(table)
        x = np.arange(len(table))
        ax.bar(x - 0.2, table["count_attended"], 0.4, label="attended", color="#b2182b")
        ax.bar(x + 0.2, table["count_attending"], 0.4, label="attending", color="#2166ac")
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=9)
        ax.set_title(f"intersection by {what}")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)


def plot_token_occurrences(table: pd.DataFrame, token: str, stem, title: str, dpi: int = 150):
    """Paper Fig 6: count of each instance (position) of one token among the attending partners."""
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(table) + 2), 4.5))
    if table.empty:
        ax.text(0.5, 0.5, f"{token!r} is never an attending partner", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        _bars(ax, [f"{token} ({p})" for p in table["position"]], table["count"].to_numpy(), f"instances of {token!r}")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, stem, dpi)
