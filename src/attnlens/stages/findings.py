"""Rule ``findings``: which conclusions of one run hold across the runs of a grid."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.attribution.leaderboard import LEADERBOARD_SCHEMA
from attnlens.attribution.sanity import SANITY_SCHEMA
from attnlens.classifier.selection import PREDICTIONS_SCHEMA
from attnlens.findings.statements import (
    RUN_COLUMNS,
    concordance,
    describe,
    flag_failures,
    headline_values,
    rankings,
    sanity_verdicts,
    statements,
)
from attnlens.io import StrPath, atomic_dir, load_json, load_parquet, read_csv_table
from attnlens.pipeline.config import FiguresConfig, FindingsConfig
from attnlens.render.findings import plot_quantities, plot_sanity, write_findings
from attnlens.similarity.aggregate import SUMMARY_SCHEMA

logger = logging.getLogger(__name__)

#: The topology claim's schema (rule bottleneck_distances).
CLAIM_SCHEMA = "topology_claim/v1"


def _at(paths: Sequence[StrPath], i: int) -> StrPath | None:
    return paths[i] if paths else None


def collect_values(
    runs: Sequence[Mapping[str, Any]],
    metrics_paths: Sequence[StrPath] = (),
    summary_paths: Sequence[StrPath] = (),
    similarity_dirs: Sequence[StrPath] = (),
    leaderboard_paths: Sequence[StrPath] = (),
    claim_paths: Sequence[StrPath] = (),
) -> pd.DataFrame:
    """Every run's headline quantities (:func:`attnlens.findings.statements.headline_values`), with the run's name and
    place in the grid; a list of paths is one per run, in the order of ``runs``, or empty when the runs did not
    make that artifact."""
    frames = []
    for i, run in enumerate(runs):
        metrics = _at(metrics_paths, i)
        summary = _at(summary_paths, i)
        tables = _at(similarity_dirs, i)
        board = _at(leaderboard_paths, i)
        claim = _at(claim_paths, i)
        values = headline_values(
            metrics=load_json(metrics, PREDICTIONS_SCHEMA) if metrics else None,
            summary=load_parquet(summary, SUMMARY_SCHEMA)[0] if summary else None,
            masking=read_csv_table(Path(tables) / "masking_increase.csv") if tables else None,
            leaderboard=load_parquet(board, LEADERBOARD_SCHEMA)[0] if board else None,
            claims=load_json(claim, CLAIM_SCHEMA)["claims"] if claim else None,
        )
        for column in RUN_COLUMNS:
            values[column] = run[column]
        frames.append(values)
    return pd.concat(frames, ignore_index=True)


def collect_sanity(runs: Sequence[Mapping[str, Any]], sanity_paths: Sequence[StrPath]) -> pd.DataFrame:
    """Every run's sanity-check rows (rule sanity_check), with the run's name and place in the grid."""
    frames = []
    for run, path in zip(runs, sanity_paths, strict=True):
        frame = load_parquet(path, SANITY_SCHEMA)[0]
        for column in RUN_COLUMNS:
            frame[column] = run[column]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def pair_quantities(tables_dir: StrPath) -> pd.DataFrame:
    """The pair study's attribution errors (it reads none of the grid's axes: one value each, for every run)."""
    errors = read_csv_table(Path(tables_dir) / "pair_errors.csv")
    rows = []
    for r in errors.to_dict("records"):
        rows.append(
            {
                "dataset": "pair study",
                "model": f"{r['model']} ({r['similarity']})",
                "family": "pair attribution",
                "item": f"{r['mode']} mode",
                "metric": "mean abs error",
                "n_runs": 1,
                "mean": float(r["mean abs error"]),
                "std": float("nan"),
                "min": float(r["mean abs error"]),
                "max": float(r["mean abs error"]),
                "note": "the pair study reads none of the grid's axes: one value for every run",
            }
        )
    return pd.DataFrame(rows)


def run_findings(
    cfg: FindingsConfig,
    figures_cfg: FiguresConfig,
    runs: Sequence[Mapping[str, Any]],
    out_dir: StrPath,
    figures_dir: StrPath,
    metrics_paths: Sequence[StrPath] = (),
    summary_paths: Sequence[StrPath] = (),
    similarity_dirs: Sequence[StrPath] = (),
    leaderboard_paths: Sequence[StrPath] = (),
    claim_paths: Sequence[StrPath] = (),
    sanity_paths: Sequence[StrPath] = (),
    pair_tables: StrPath | None = None,
) -> pd.DataFrame:
    """Rule ``findings``: the findings tables into ``out_dir`` and one figure per headline quantity into
    ``figures_dir``; returns the statements."""
    values = collect_values(runs, metrics_paths, summary_paths, similarity_dirs, leaderboard_paths, claim_paths)
    quantities = describe(values)
    if pair_tables:
        quantities = pd.concat([quantities, pair_quantities(pair_tables)], ignore_index=True)
    agreement = concordance(values)
    sanity = sanity_verdicts(collect_sanity(runs, sanity_paths), cfg.sanity_max_rho) if sanity_paths else None
    said = statements(values, cfg.min_share, cfg.alpha)
    if sanity is not None:
        said = flag_failures(said, sanity)
    ranks = rankings(values)
    grid = pd.DataFrame([dict(r) for r in runs])
    write_findings(Path(out_dir), grid, quantities, agreement, said, ranks, cfg, sanity)
    with atomic_dir(figures_dir) as tmp:
        plot_quantities(values, tmp, figures_cfg.dpi)
        if sanity is not None:
            plot_sanity(sanity, tmp, figures_cfg.dpi)
    if len(said):
        logger.info(
            "%d statements over %d runs: %s",
            len(said),
            len(runs),
            ", ".join(f"{v} {n}" for v, n in said["verdict"].value_counts().items()),
        )
    return said
