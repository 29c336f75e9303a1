"""The findings report of a grid: its tables (CSV, LaTeX, Markdown) and one figure per headline quantity."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlens.io import atomic_path, file_stem
from attnlens.render.figures import save_figure
from attnlens.render.tables import markdown_table, number, write_table

#: Statement columns of the findings tables.
STATEMENT_COLUMNS = ["dataset", "model", "kind", "statement", "runs_holding", "n_runs", "p_value", "verdict", "note"]


def headline(statements: pd.DataFrame, concordance: pd.DataFrame) -> pd.DataFrame:
    """The statements the report lists: every one but the method orderings, and of those the orderings of
    neighbours in each scope's mean ranking (the rest are in ``statements.csv``)."""
    if statements.empty:
        return statements
    keep = statements["kind"] != "method ordering"
    for row in concordance.itertuples(index=False):
        order = row.mean_ranking.split(" > ")
        for a, b in itertools.pairwise(order):
            texts = {f"{a} better than {b} on {row.metric}", f"{b} better than {a} on {row.metric}"}
            keep |= (
                (statements["dataset"] == row.dataset)
                & (statements["model"] == row.model)
                & statements["statement"].str.split(" (", n=1, regex=False).str[0].isin(texts)
            )
    return statements[keep]


def findings_markdown(
    runs: pd.DataFrame,
    quantities: pd.DataFrame,
    concordance: pd.DataFrame,
    shown: pd.DataFrame,
    statements: pd.DataFrame,
    min_share: float,
    alpha: float,
    sanity: pd.DataFrame | None = None,
    max_rho: float = 0.5,
) -> str:
    """``findings.md``: the runs, the verdicts by kind, the sanity check, Kendall's W, the listed statements and the
    quantities."""
    counts = (
        statements.groupby(["dataset", "model", "kind", "verdict"])
        .size()
        .unstack("verdict", fill_value=0)
        .reset_index()
        if len(statements)
        else pd.DataFrame()
    )
    parts = [
        "# Findings across the runs of the grid",
        "",
        f"A statement **holds** when it holds in at least {min_share:g} of the runs and the two-sided sign test "
        f"gives p < {alpha:g}; **not stable** otherwise; **too few runs** when even every run agreeing could not "
        "reach that p. Each statement is stated the way most runs go. statements.csv has every statement, "
        "rankings.csv every run's ranking of the methods, quantities.csv every quantity's spread.",
        "",
        markdown_table(runs, "The runs"),
        markdown_table(counts, "Statements by verdict") if len(counts) else "",
        _sanity_section(sanity, max_rho),
        markdown_table(_rounded(concordance, ["kendall_w"]), "Kendall's W of the runs' rankings of methods"),
        markdown_table(_rounded(shown[STATEMENT_COLUMNS], ["p_value"]), "Statements"),
        markdown_table(_rounded(quantities, ["mean", "std", "min", "max"]), "Headline quantities across runs"),
    ]
    return "\n".join(parts)


def _sanity_section(sanity: pd.DataFrame | None, max_rho: float) -> str:
    if sanity is None or sanity.empty:
        return ""
    final = sanity[(sanity["verdict"] != "") | (sanity["note"] != "")]  # the full cascade, a verdict or why none
    columns = ["dataset", "model", "method", "level", "n_runs", "mean_rho", "min_rho", "max_rho"]
    columns += ["mean_position_rho", "verdict", "note"]
    caption = (
        f"Sanity check: Spearman ρ of each method's scores on the trained model and on the model with every "
        f"layer and the head drawn anew (fails above {max_rho:g}; every level in sanity.csv), and of the randomised "
        "scores with position"
    )
    return markdown_table(_rounded(final[columns], ["mean_rho", "min_rho", "max_rho", "mean_position_rho"]), caption)


def _rounded(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = frame.copy()
    for c in columns:
        out[c] = [number(v, 3) for v in out[c]]
    return out


def write_findings(
    out_dir: Path,
    runs: pd.DataFrame,
    quantities: pd.DataFrame,
    concordance: pd.DataFrame,
    statements: pd.DataFrame,
    rankings: pd.DataFrame,
    cfg,
    sanity: pd.DataFrame | None = None,
) -> None:
    """``findings.{csv,tex,md}`` (the listed statements; the Markdown with everything around them) and the full
    ``runs``, ``statements``, ``quantities``, ``concordance``, ``rankings`` (and ``sanity``) tables, into
    ``out_dir``."""
    out_dir = Path(out_dir)
    shown = headline(statements, concordance) if len(statements) else pd.DataFrame(columns=STATEMENT_COLUMNS)
    write_table(shown.reindex(columns=STATEMENT_COLUMNS), out_dir / "findings", "Which conclusions hold across runs")
    with atomic_path(out_dir / "findings.md") as tmp:
        tmp.write_text(
            findings_markdown(
                runs, quantities, concordance, shown, statements, cfg.min_share, cfg.alpha, sanity, cfg.sanity_max_rho
            ),
            encoding="utf-8",
        )
    write_table(runs, out_dir / "runs", "The runs of the grid and the shared jobs each reads")
    write_table(statements, out_dir / "statements", "Every statement across runs")
    write_table(quantities, out_dir / "quantities", "Headline quantities across runs")
    write_table(concordance, out_dir / "concordance", "Kendall's W of the runs' rankings of the methods")
    write_table(rankings, out_dir / "rankings", "Each run's ranking of the methods")
    if sanity is not None:
        write_table(
            sanity, out_dir / "sanity", "Sanity check: each method's ρ with the trained model along the cascade"
        )


def plot_quantities(values: pd.DataFrame, out_dir: Path, dpi: int) -> list[Path]:
    """One figure per headline quantity (a family and metric): each run's value as a point (colour: model), the
    mean across runs as a bar and ± one standard deviation as a line, one row per item."""
    written = []
    models = sorted(values["model"].unique())
    colours = dict(zip(models, plt.cm.tab10(np.arange(len(models)) % 10), strict=True))
    for (family, metric), group in values.groupby(["family", "metric"], sort=False):
        items = list(dict.fromkeys(group["item"]))
        fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(items) + 1.4))
        for y, item in enumerate(items):
            rows = group[group["item"] == item]
            v = rows["value"].to_numpy(dtype=float)
            finite = np.isfinite(v)
            if finite.any():
                mean, sd = float(v[finite].mean()), float(v[finite].std(ddof=1)) if finite.sum() > 1 else 0.0
                ax.plot([mean - sd, mean + sd], [y, y], color="black", linewidth=1)
                ax.plot([mean, mean], [y - 0.3, y + 0.3], color="black", linewidth=2)
            jitter = np.linspace(-0.15, 0.15, len(rows)) if len(rows) > 1 else np.zeros(1)
            ax.scatter(v, y + jitter, c=[colours[m] for m in rows["model"]], s=14, zorder=3)
        ax.set_yticks(range(len(items)), items, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(metric)
        ax.set_title(f"{family}: {metric} per run (bar: mean, line: ± 1 sd)", fontsize=9)
        handles = [plt.Line2D([], [], marker="o", linestyle="", color=colours[m], label=m) for m in models]
        ax.legend(handles=handles, fontsize=7, loc="best")
        written += save_figure(fig, out_dir / file_stem(f"{family}_{metric}".replace(".", "-")), dpi)
    return written


def plot_sanity(sanity: pd.DataFrame, out_dir: Path, dpi: int) -> list[Path]:
    """The randomisation cascade per scope: each method's mean ρ with the trained model's scores, level by level
    (Adebayo et al. 2018, Fig. 2), with the threshold of the verdict left to the table."""
    written = []
    for (dataset, model), rows in sanity.groupby(["dataset", "model"], sort=False):
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        order = list(dict.fromkeys(rows.sort_values("layers")["level"]))
        for method, group in rows.groupby("method", sort=False):
            group = group.set_index("level").reindex(order)
            ax.plot(range(len(order)), group["mean_rho"].to_numpy(dtype=float), marker="o", markersize=3, label=method)
        ax.set_xticks(range(len(order)), order, fontsize=7)
        ax.set_xlabel("randomised, from the top (head, then layers)")
        ax.set_ylabel("Spearman ρ with the trained model")
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_title(f"Sanity check: {dataset}, {model}", fontsize=9)
        ax.legend(fontsize=6, ncol=2, loc="best")
        written += save_figure(fig, out_dir / file_stem(f"sanity_{dataset}_{model}"), dpi)
    return written
