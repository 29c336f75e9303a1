"""The paper's similarity study: Tables 1–4 from the per-example comparisons, and their figures.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.data.sources import MANIFEST_SCHEMA as SPLIT_MANIFEST_SCHEMA
from attnlens.errors import InputError
from attnlens.io import (
    StrPath,
    atomic_dir,
    file_stem,
    load_json,
    load_shards,
    provenance,
    save_csv,
    save_parquet,
)
from attnlens.pipeline.config import (
    FiguresConfig,
    SimilarityConfig,
)
from attnlens.pipeline.entry import stage
from attnlens.render.figures import (
    plot_head_agreement,
    plot_similarity_distributions,
)
from attnlens.render.tables import (
    paper_table,
    write_table,
)
from attnlens.similarity.aggregate import SUMMARY_SCHEMA, paired_tests, summarise
from attnlens.similarity.metrics import DEVIATIONS, HEADS_SCHEMA, HEADS_TYPES, load_similarity
from attnlens.similarity.paper import MASKED_WITH, legacy_means_layout, masking_increase, paper_metrics

logger = logging.getLogger(__name__)


@stage("similarity")
def run_aggregate_similarity(
    cfg: SimilarityConfig,
    similarity_paths: Sequence[StrPath],
    manifest_path: StrPath,
    summary_path: StrPath,
    tables_dir: StrPath,
) -> dict:
    """Rule ``aggregate_similarity``: Tables 1–2 (and 3–4 per extra dataset), tests and the tidy summary.

    This run's dataset is called ``similarity.dataset_name``, or by its source (split manifest ``name``).
    """
    name = cfg.dataset_name or load_json(manifest_path, SPLIT_MANIFEST_SCHEMA)["name"]
    if name in [extra["name"] for extra in cfg.extra_datasets]:
        raise InputError(
            "config", "similarity.extra_datasets", f"expected names other than this run's dataset name {name!r}"
        )
    datasets = [(name, load_similarity(similarity_paths))]
    for extra in cfg.extra_datasets:
        datasets.append(
            (
                extra["name"],
                load_similarity([extra["path"]], where=f"config: similarity.extra_datasets[{extra['name']}]"),
            )
        )
    t0 = time.perf_counter()
    summaries, notes = [], []
    with atomic_dir(tables_dir) as tmp:
        for i, (name, frame) in enumerate(datasets):
            summary = summarise(frame, cfg.seed, cfg.n_boot)
            tests = paired_tests(frame)
            n_examples = int(frame["example_id"].nunique()) if len(frame) else 0
            numbers = (1, 2) if i == 0 else (3, 4)
            _dataset_tables(summary, tests, cfg, Path(tmp), numbers, name, n_examples)
            summaries.append(summary.assign(dataset=name))
            notes += missing_numbers(name, summary, tests)
    seconds = time.perf_counter() - t0
    merged = pd.concat(summaries, ignore_index=True)
    prov = provenance(
        SUMMARY_SCHEMA, cfg.to_dict(), cfg.seed, seconds=round(seconds, 2), deviations=list(DEVIATIONS), notes=notes
    )
    for note in notes:
        logger.warning("%s", note)
    save_parquet(merged, summary_path, prov)
    logger.info("similarity tables for %s in %.1f s", ", ".join(n for n, _ in datasets), seconds)
    return {"seconds": seconds}


@stage("similarity", "figures")
def run_plot_similarity(
    cfg: SimilarityConfig,
    figures_cfg: FiguresConfig,
    similarity_paths: Sequence[StrPath],
    heads_paths: Sequence[StrPath],
    distributions_stem: StrPath,
    heads_stem: StrPath,
) -> None:
    """Rule ``plot_similarity``: metric distributions (legacy, fixed, chance) and the per-head agreement map."""
    frame = load_similarity(similarity_paths)
    families = [(m.label, m.legacy, m.fixed) for g in paper_metrics(cfg.rbo_p).values() for m in g]
    for scaled, stem in ((False, distributions_stem), (True, f"{distributions_stem}_scaled")):
        plot_similarity_distributions(frame, families, LAYER_CONFIGURATIONS, MASKED_WITH, scaled, stem, figures_cfg.dpi)
    heads = load_shards(heads_paths, HEADS_SCHEMA, HEADS_TYPES)
    n_layers, n_heads = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    means = heads.groupby(["layer", "head"])[["spearman", "jaccard_top5"]].mean()
    maps = {
        "Spearman ρ (received attention vs |IG|)": means["spearman"].to_numpy().reshape(n_layers, n_heads),
        "top-5 % Jaccard": means["jaccard_top5"].to_numpy().reshape(n_layers, n_heads),
    }
    plot_head_agreement(maps, heads_stem, int(heads["example_id"].nunique()), figures_cfg.dpi)


def _dataset_tables(summary, tests, cfg, out: Path, numbers: tuple[int, int], name: str, n_examples: int) -> None:
    """Tables ``numbers`` (1–2 or 3–4) of one dataset, its masking increase, tests, summary, legacy layout."""
    suffix = "" if numbers[0] == 1 else f"_{file_stem(name)}"
    groups = paper_metrics(cfg.rbo_p)
    intro = (
        f"{name}, {n_examples} examples; cell = mean [bootstrap 95 % CI] "
        f"(chance: mean over {cfg.n_permutations} permuted attributions)"
    )
    write_table(
        paper_table(summary, groups["similarity"]),
        out / f"table{numbers[0]}_similarity{suffix}",
        f"Table {numbers[0]}: attention vs IG attribution, cosine, Kendall τ and RBO, legacy and fixed. {intro}.",
    )
    write_table(
        paper_table(summary, groups["jaccard"]),
        out / f"table{numbers[1]}_jaccard{suffix}",
        f"Table {numbers[1]}: Jaccard of the top-5 % attended and attributed tokens, legacy and fixed. {intro}.",
    )
    write_table(
        masking_increase(summary, cfg.rbo_p),
        out / f"masking_increase{suffix}",
        "Percentage increase due to masking (paper §5.2.3: mean over layer configurations × scaling of "
        "(masked − unmasked) / unmasked), and the absolute change of the metric and of its chance level.",
    )
    shown = {m.legacy for g in groups.values() for m in g} | {m.fixed for g in groups.values() for m in g}
    paper_tests = tests[tests["configuration"].isin(["last", "all"]) & tests["metric"].isin(shown)]
    own_mask = ((paper_tests["mode"] == "legacy") & ~paper_tests["held"].str.contains("mask fixed")) | (
        (paper_tests["mode"] == "fixed") & ~paper_tests["held"].str.contains("mask legacy")
    )
    shown_tests = paper_tests[own_mask].reset_index(drop=True)
    shown_tests["p_value"] = [f"{p:.2e}" if np.isfinite(p) else "n/a" for p in shown_tests["p_value"]]
    write_table(
        shown_tests,
        out / f"similarity_tests{suffix}",
        f"Paired Wilcoxon signed-rank tests over the {n_examples} examples of {name} "
        f"(every configuration, metric and mask: similarity_tests_all{suffix}.csv).",
    )
    save_csv(tests, out / f"similarity_tests_all{suffix}.csv")
    save_csv(summary, out / f"similarity_summary{suffix}.csv")
    save_csv(legacy_means_layout(summary), out / f"similarity_means_legacy{suffix}.csv")


def missing_numbers(name: str, summary: pd.DataFrame, tests: pd.DataFrame) -> list[str]:
    """Run notes for what a dataset's tables could not compute: one line per distinct reason."""
    out = []
    for what, frame in (("dataset means", summary), ("Wilcoxon tests", tests)):
        if not len(frame) or "note" not in frame:
            continue
        for reason, count in frame.loc[frame["note"].str.startswith("not computable"), "note"].value_counts().items():
            out.append(f"{name}: {count} of {len(frame)} {what} {reason}")
    return out
