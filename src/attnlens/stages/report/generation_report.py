"""Rules ``answer_leaderboard`` and ``answer_explorer``: the generation study's leaderboard (table and figure) and
one page per showcased answer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attribution.artifacts import (
    ANSWER_SCORE_COLUMNS,
    ANSWER_SCORES_SCHEMA,
    JUDGED_COLUMNS,
    JUDGED_SCHEMA,
    load_answer_shards,
)
from attnlens.attribution.leaderboard import summarise as summarise_leaderboard
from attnlens.attribution.methods import label
from attnlens.generation.answer_artifacts import GENERATOR_METRICS_SCHEMA, RESPONSE_COLUMNS, RESPONSES_SCHEMA
from attnlens.generation.answer_leaderboard import (
    ANSWER_LEADERBOARD_SCHEMA,
    REFERENCES,
    answer_metrics,
    structure_answers,
    structure_leaderboards,
)
from attnlens.io import StrPath, atomic_dir, load_json, load_parquet, provenance, save_parquet
from attnlens.pipeline.config import FiguresConfig, GenerationConfig
from attnlens.pipeline.entry import stage
from attnlens.render.figures import plot_leaderboard, save_figure
from attnlens.render.generation_pages import answer_page, explorer_index
from attnlens.render.tables import leaderboard_table, write_table

log = logging.getLogger(__name__)


@stage("generation", "figures")
def run_answer_leaderboard(
    cfg: GenerationConfig,
    figures: FiguresConfig,
    judged_paths: Sequence[StrPath],
    responses_path: StrPath,
    summary_path: StrPath,
    by_structure_path: StrPath,
    tables_dir: StrPath,
    figure_stem: StrPath,
) -> pd.DataFrame:
    """Rule ``answer_leaderboard``: per method and metric, the mean over the answers with a paired bootstrap 95 %
    interval and a paired Wilcoxon test against ``generation.baseline`` (Holm-adjusted); its table and figure; and
    the same per planted structure of the contexts (``data.synthetic.structures``), beside what the model answered
    in each (:func:`structure_answers`)."""
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    judged = load_answer_shards(judged_paths, JUDGED_SCHEMA, JUDGED_COLUMNS, responses["example_id"])
    columns = answer_metrics(tuple(cfg.top_k))
    notes = []
    if cfg.baseline not in cfg.methods:
        notes.append(f"no paired tests: generation.baseline {cfg.baseline!r} is not in generation.methods")
    summary = summarise_leaderboard(judged, columns, cfg.baseline, cfg.seed, cfg.n_bootstrap, REFERENCES)
    n = judged["example_id"].nunique()
    prov = provenance(ANSWER_LEADERBOARD_SCHEMA, {"generation": cfg.to_dict()}, cfg.seed, n_answers=n, notes=notes)
    save_parquet(summary, summary_path, prov)
    caption = (
        f"what a generated answer rests on, over {n} answers: mean [bootstrap 95 % interval]; top-k drop = fall of "
        f"the answer's {cfg.score} without the method's top k sources ({cfg.removal}d); LDS = Spearman ρ on "
        f"{cfg.n_heldout} held-out random ablations; precision/recall against the planted sources; * paired "
        f"Wilcoxon p < 0.05 against {cfg.baseline}, Holm-adjusted over the table's tests; exact-truth columns over the "
        f"answers of at most {cfg.exact_sources} sources, every ablation scored"
    )
    tables = Path(tables_dir)
    write_table(leaderboard_table(summary, columns), tables / "answer_leaderboard", caption)
    write_table(summary, tables / "answer_leaderboard_long", f"{caption} (every number)")
    save_figure(plot_leaderboard(summary, columns, cfg.baseline), figure_stem, figures.dpi)
    by_structure = structure_leaderboards(judged, responses, columns, cfg.baseline, cfg.seed, cfg.n_bootstrap)
    save_parquet(by_structure, by_structure_path, prov)
    write_table(
        structure_answers(responses),
        tables / "answer_structures",
        "what the model answered per planted structure: answers, right (exact match with the reference), follows the "
        "context (names a value the context states for the question), the same as its answer without the context",
    )
    write_table(
        leaderboard_table_by_structure(by_structure, columns),
        tables / "answer_leaderboard_by_structure",
        f"{caption}; per planted structure, each its own family of tests",
    )
    for note in notes:
        log.warning("%s", note)
    return summary


def leaderboard_table_by_structure(by_structure: pd.DataFrame, columns) -> pd.DataFrame:
    """The leaderboard table of each structure, one above the other, a ``structure`` column first."""
    parts = []
    for name, part in by_structure.groupby("structure", sort=True):
        table = leaderboard_table(part.drop(columns=["structure", "n_answers"]), columns)
        table.insert(0, "structure", f"{name} ({int(part['n_answers'].iloc[0])} answers)")
        parts.append(table)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["structure"])


def showcase(responses: pd.DataFrame, n: int) -> list[tuple[str, str]]:
    """``(example_id, why)`` of the answers that get an explorer page: the most probable right answer, the least
    probable wrong one, then the rest in order, ``n`` in all."""
    right = responses[responses["exact_match"] == 1.0]
    wrong = responses[responses["exact_match"] != 1.0]
    picks: list[tuple[str, str]] = []
    if len(right):
        picks.append((str(right.loc[right["log_prob"].idxmax(), "example_id"]), "the most probable right answer"))
    if len(wrong):
        picks.append((str(wrong.loc[wrong["log_prob"].idxmin(), "example_id"]), "the least probable wrong answer"))
    for eid in responses["example_id"]:
        if len(picks) >= n:
            break
        if all(eid != p for p, _ in picks):
            picks.append((str(eid), "in the test split's order"))
    return picks[:n]


@stage("generation")
def run_answer_explorer(
    cfg: GenerationConfig,
    responses_path: StrPath,
    scores_paths: Sequence[StrPath],
    metrics_path: StrPath,
    out_dir: StrPath,
) -> list[str]:
    """Rule ``answer_explorer``: one page per showcased answer (``generation.showcase``) with its context's sources
    coloured by every method beside the question, the answer and the reference, and an index page."""
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    scored = load_answer_shards(scores_paths, ANSWER_SCORES_SCHEMA, ANSWER_SCORE_COLUMNS, responses["example_id"])
    metrics = load_json(metrics_path, GENERATOR_METRICS_SCHEMA)
    picks = showcase(responses, cfg.showcase)
    pages = []
    with atomic_dir(out_dir) as tmp:
        for eid, why in picks:
            row = responses[responses["example_id"] == eid].iloc[0]
            mine = scored[scored["example_id"] == eid]
            methods = [
                (m, label(m), np.asarray(s, dtype=np.float64))
                for m, s in zip(mine["method"], mine["scores"], strict=True)
            ]
            name = f"{eid}.html"
            (tmp / name).write_text(answer_page(row, methods, why), encoding="utf-8")
            pages.append((name, eid, why, str(row["answer"]), float(row["exact_match"])))
        (tmp / "index.html").write_text(explorer_index(pages, metrics), encoding="utf-8")
    return [p[0] for p in pages]
