"""The similarity study's figures: the distributions behind Tables 1–4, and agreement per explained target."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from attnlens.render.figures.canvas import save_figure


def plot_target_agreement(table: pd.DataFrame, stem, dpi: int = 150) -> list[Path]:
    """Per metric and attention configuration (panels), per explained output (groups): attention–attribution
    agreement with its 95 % interval, its chance level, the agreement between the output's attribution and the
    other explained outputs' attributions of the same documents, and the first minus the second, paired by document
    (:func:`attnlens.similarity.per_target.target_agreement`)."""
    metrics = list(dict.fromkeys(table["metric"]))
    configurations = list(dict.fromkeys(table["configuration"]))
    fig, axes = plt.subplots(
        len(metrics),
        len(configurations),
        squeeze=False,
        figsize=(4.2 * len(configurations) + 1, 2.8 * len(metrics) + 0.8),
    )
    # (column, its interval's columns' prefix, legend, colour)
    series = (
        ("attention", "attention", "attention vs attribution", "#1b6ca8"),
        ("chance", None, "chance (permuted)", "#c6dbef"),
        ("between_targets", "between", "attribution vs other targets' attributions", "#d95f02"),
        ("difference", "difference", "attention minus between (paired by document)", "#7570b3"),
    )
    width = 0.8 / len(series)
    for r, metric in enumerate(metrics):
        for c, configuration in enumerate(configurations):
            ax = axes[r][c]
            part = table[(table["metric"] == metric) & (table["configuration"] == configuration)]
            x = np.arange(len(part))
            for i, (column, interval, label, colour) in enumerate(series):
                values = part[column].to_numpy(dtype=float)
                err = None
                if interval:
                    lo, hi = part[f"{interval}_lo"].to_numpy(float), part[f"{interval}_hi"].to_numpy(float)
                    err = np.vstack([values - lo, hi - values])
                    err = np.where(np.isfinite(err), err, 0.0)
                ax.bar(
                    x + (i - (len(series) - 1) / 2) * width,
                    np.nan_to_num(values),
                    width,
                    yerr=err,
                    color=colour,
                    label=label,
                    capsize=2,
                )
            names = [str(n) if len(str(n)) <= 22 else str(n)[:21] + "…" for n in part["name"]]
            ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
            ax.axhline(0, color="black", linewidth=0.5)
            layers = {"last": "the last layer", "all": "all layers"}.get(configuration, configuration)
            ax.set_title(f"{metric}, attention of {layers}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("One attention map, one attribution per explained output: agreement per target")
    fig.tight_layout(rect=(0, 0.08, 1, 1))  # room for the two-row legend
    return save_figure(fig, stem, dpi)


#: Box colours of the similarity distributions: metric value and chance level, per mode.
_MODE_COLOURS = {"legacy": ("#d95f02", "#fdd0a2"), "fixed": ("#1b6ca8", "#c6dbef")}


def plot_similarity_distributions(
    frame: pd.DataFrame, families, layers, masked_with: dict[str, str], scaled: bool, stem, dpi: int = 150
) -> list[Path]:
    """Per metric family (rows) and masking (columns): per layer configuration, boxes of the per-example
    legacy value, its chance level, the fixed value and its chance level."""
    frame = frame[frame["scaled"] == scaled]
    fig, axes = plt.subplots(len(families), 2, figsize=(12, 2.6 * len(families) + 0.8), squeeze=False)
    for row, (label, legacy, fixed) in enumerate(families):
        for col, masked in enumerate((False, True)):
            ax = axes[row, col]
            data, positions, colours = [], [], []
            for g, ly in enumerate(layers):
                slot = 0
                for mode, metric in (("legacy", legacy), ("fixed", fixed)):
                    mask = masked_with[mode] if masked else "none"
                    part = frame[
                        (frame["mode"] == mode)
                        & (frame["metric"] == metric)
                        & (frame["configuration"] == ly)
                        & (frame["mask"] == mask)
                    ]
                    for what, colour in zip(("value", "chance"), _MODE_COLOURS[mode], strict=True):
                        v = part[what].to_numpy(dtype=float)
                        data.append(v[np.isfinite(v)])
                        positions.append(g * 5 + slot)
                        colours.append(colour)
                        slot += 1
            boxes = ax.boxplot(data, positions=positions, widths=0.8, patch_artist=True, showfliers=False)
            for patch, colour in zip(boxes["boxes"], colours, strict=True):
                patch.set_facecolor(colour)
            for median in boxes["medians"]:
                median.set_color("black")
            ax.set_xticks([g * 5 + 1.5 for g in range(len(layers))], list(layers))
            ax.set_title(f"{label}, {'masked' if masked else 'unmasked'}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    handles = [
        Patch(facecolor=c, label=f"{mode} {what}")
        for mode, pair in _MODE_COLOURS.items()
        for what, c in zip(("value", "chance"), pair, strict=True)
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False)
    fig.suptitle(
        f"Attention vs IG per example, {'scaled' if scaled else 'unscaled'} attention "
        "(masked: legacy = zero-filled legacy mask, fixed = kept positions of the fixed mask)"
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save_figure(fig, stem, dpi)
