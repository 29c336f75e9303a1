"""Rule ``findings``: which conclusions of one run hold across the runs of a grid."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.attribution.leaderboard import LEADERBOARD_SCHEMA
from attnlens.attribution.sanity_check import SANITY_SCHEMA
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
from attnlens.generation.answer_artifacts import GENERATOR_METRICS_SCHEMA
from attnlens.generation.answer_leaderboard import ANSWER_LEADERBOARD_SCHEMA
from attnlens.io import StrPath, atomic_dir, load_json, load_parquet, read_csv_table
from attnlens.pipeline.config import FiguresConfig, FindingsConfig
from attnlens.pipeline.entry import stage
from attnlens.render.findings_report import plot_quantities, plot_sanity, write_findings
from attnlens.similarity.aggregate import SUMMARY_SCHEMA

logger = logging.getLogger(__name__)

#: The topology claim's schema (rule bottleneck_distances).
CLAIM_SCHEMA = "topology_claim/v1"


def _generator_metrics(path: StrPath) -> dict[str, Any]:
    return {**load_json(path, GENERATOR_METRICS_SCHEMA), "task": "generation"}


#: How rule findings reads each artifact of a run (its input name): the loader, and the argument of
#: :func:`~attnlens.findings.statements.headline_values` it fills.
READERS: dict[str, tuple[Callable[[StrPath], Any], str]] = {
    "metrics": (lambda p: load_json(p, PREDICTIONS_SCHEMA), "metrics"),
    "generator_metrics": (_generator_metrics, "metrics"),
    "summary": (lambda p: load_parquet(p, SUMMARY_SCHEMA)[0], "summary"),
    "similarity": (lambda p: read_csv_table(Path(p) / "masking_increase.csv"), "masking"),
    "leaderboard": (lambda p: load_parquet(p, LEADERBOARD_SCHEMA)[0], "leaderboard"),
    "answer_leaderboard": (lambda p: load_parquet(p, ANSWER_LEADERBOARD_SCHEMA)[0], "answer_leaderboard"),
    "answer_structures": (lambda p: load_parquet(p, ANSWER_LEADERBOARD_SCHEMA)[0], "answer_structures"),
    "claims": (lambda p: load_json(p, CLAIM_SCHEMA)["claims"], "claims"),
}
#: The inputs that hold a run's sanity-check rows (rules sanity_check and answer_sanity).
SANITY_INPUTS = ("sanity", "answer_sanity")


def collect_values(
    runs: Sequence[Mapping[str, Any]], inputs: Mapping[str, Sequence[StrPath]], surrogate_share: float = 0.8
) -> pd.DataFrame:
    """Every run's headline quantities (:func:`attnlens.findings.statements.headline_values`), with the run's name and
    place in the grid; ``inputs``: per artifact of :data:`READERS`, one path per run in the order of ``runs`` (an
    artifact the runs did not make is left out)."""
    frames = []
    for i, run in enumerate(runs):
        given = {READERS[name][1]: READERS[name][0](paths[i]) for name, paths in inputs.items() if name in READERS}
        values = headline_values(**given, surrogate_share=surrogate_share)
        for column in RUN_COLUMNS:
            values[column] = run[column]
        frames.append(values)
    return pd.concat(frames, ignore_index=True)


def collect_sanity(runs: Sequence[Mapping[str, Any]], sanity_paths: Sequence[StrPath]) -> pd.DataFrame:
    """Every run's sanity-check rows (rule sanity_check or answer_sanity), with the run's name and place in the
    grid."""
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


@stage("findings", "figures")
def run_findings(
    cfg: FindingsConfig,
    figures_cfg: FiguresConfig,
    runs: Sequence[Mapping[str, Any]],
    statements_path: StrPath,
    figures_dir: StrPath,
    pair_tables: StrPath | None = None,
    **inputs: Sequence[StrPath],
) -> pd.DataFrame:
    """Rule ``findings``: the findings tables beside ``statements_path`` and one figure per headline quantity into
    ``figures_dir``; returns the statements. ``inputs``: per artifact (:data:`READERS`, :data:`SANITY_INPUTS`), one
    path per run in the order of ``runs``."""
    values = collect_values(runs, inputs, cfg.surrogate_share)
    quantities = describe(values)
    if pair_tables:
        quantities = pd.concat([quantities, pair_quantities(pair_tables)], ignore_index=True)
    agreement = concordance(values)
    sanity_paths = next((inputs[name] for name in SANITY_INPUTS if inputs.get(name)), None)
    sanity = sanity_verdicts(collect_sanity(runs, sanity_paths), cfg.sanity_max_rho) if sanity_paths else None
    said = statements(values, cfg.min_share, cfg.alpha)
    if sanity is not None:
        said = flag_failures(said, sanity)
    ranks = rankings(values)
    grid = pd.DataFrame([dict(r) for r in runs])
    write_findings(Path(statements_path).parent, grid, quantities, agreement, said, ranks, cfg, sanity)
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
