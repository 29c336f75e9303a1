"""Figures (PNG + PDF, 1-based layer and head labels): attention stage (paper Figs 2, 4–7) and similarity.

Every figure is written through :func:`save_figure` (atomic, both formats). The layers × heads grid
of binned attention is drawn as one mosaic image rather than 144 sub-plots, so a 12 × 12 grid of
128 × 128 images renders in about a second.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from attnlens.io import PROVENANCE_KEY, artifact_provenance, atomic_path

matplotlib.rcParams["text.parse_math"] = False  # "$…$" in an example id or a token is text, not mathtext

SCALES = ("log", "linear", "rank")


def save_figure(fig, stem: str | Path, dpi: int = 150, notes: list[str] | None = None) -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.pdf`` atomically, with provenance (and run ``notes``) in their metadata,
    and close the figure."""
    stem = Path(stem)
    written = []
    for suffix in (".png", ".pdf"):
        path = stem.with_suffix(suffix)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=suffix[1:], metadata=figure_metadata(suffix, notes))
        written.append(path)
    plt.close(fig)
    return written


def figure_metadata(suffix: str, notes: list[str] | None = None) -> dict:
    """Metadata of a figure file: the job's provenance as JSON (PNG text chunk ``attnlens``, PDF ``Subject``).

    It holds no creation time, so a figure stays reproducible byte for byte. ``notes`` go to the run notes.
    """
    record = artifact_provenance("figure")
    if notes:
        record["notes"] = list(notes)
    prov = json.dumps(record, sort_keys=True)
    if suffix == ".png":
        return {"Software": "attnlens", PROVENANCE_KEY: prov}
    return {"Creator": "attnlens", "CreationDate": None, "Subject": prov}


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


# --- rules ------------------------------------------------------------------------------------


def plot_skipped(stem, what: str, why: str, dpi: int = 150, notes: list[str] | None = None) -> list[Path]:
    """A figure that says it was skipped and why, in place of one whose subject this run does not have."""
    fig, ax = plt.subplots(figsize=(8, 2.5))
    # wrapped here: matplotlib's own wrapping measures text as mathtext whatever text.parse_math says
    lines = [*textwrap.wrap(f"{what}: skipped", 90), *textwrap.wrap(why, 90)]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return save_figure(fig, stem, dpi, notes)


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
    ``baseline`` gives p < 0.05."""
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
            significant = np.isfinite(r.p_value) and r.p_value < 0.05
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
        f"filled: paired Wilcoxon p < 0.05 against {baseline} (red)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
