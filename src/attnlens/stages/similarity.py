"""Rules of ``workflow/rules/similarity.smk``: per-shard comparison, dataset tables, examples, figures."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.attention.summaries import load_summaries
from attnlens.attribution.ig import load_attributions
from attnlens.compare.aggregate import SUMMARY_SCHEMA, paired_tests, summarise
from attnlens.compare.metrics import (
    COLUMNS,
    DEVIATIONS,
    HEADS_SCHEMA,
    HEADS_TYPES,
    MODES,
    SIMILARITY_SCHEMA,
    SIMILARITY_TYPES,
    attention_vectors,
    compare_example,
    head_agreement,
    load_similarity,
    token_masks,
)
from attnlens.compare.paper import (
    LAYER_LABELS,
    MASKED_WITH,
    legacy_means_layout,
    masking_increase,
    paper_metrics,
    top_set_table,
    value_counts,
)
from attnlens.config import FiguresConfig, SimilarityConfig
from attnlens.data import MANIFEST_SCHEMA
from attnlens.errors import InputError
from attnlens.importance import load_importance_modes
from attnlens.io import (
    StrPath,
    atomic_dir,
    atomic_path,
    file_stem,
    load_json,
    load_shards,
    provenance,
    save_csv,
    save_parquet,
    write_sidecar,
)
from attnlens.models.loading import load_tokenizer
from attnlens.render.escape import markdown_cell
from attnlens.render.figures import plot_head_agreement, plot_similarity_distributions
from attnlens.render.tables import example_metrics_table, markdown_table, paper_table, write_table
from attnlens.selection import load_selection, showcased_once
from attnlens.tokens import display_tokens

logger = logging.getLogger(__name__)


def run_compare(
    cfg: SimilarityConfig,
    summary_path: StrPath,
    attribution_paths: Sequence[StrPath],
    importance_path: StrPath,
    model_dir: StrPath,
    out_path: StrPath,
    heads_path: StrPath,
) -> dict:
    """Rule ``compare``: metrics of every example of one attention shard, and per-head agreement."""
    tokenizer = load_tokenizer(model_dir)
    importance = load_importance_modes(importance_path, MODES)
    examples = load_summaries([summary_path]).examples
    attributions = load_attributions(attribution_paths).set_index("example_id")
    frames, heads = [], []
    t0 = time.perf_counter()
    for eid, ex in examples.items():
        if eid not in attributions.index:
            raise InputError(", ".join(map(str, attribution_paths)), "example_id", f"expected an attribution of {eid}")
        row = attributions.loc[eid]
        ids = [int(i) for i in row["input_ids"]]
        if ex.input_ids.tolist() != ids:
            raise InputError(summary_path, "input_ids", f"expected the attributed token ids of {eid}")
        keep, special = token_masks(tokenizer, ids, cfg.legacy_mask)
        received = ex.received.numpy()
        a = np.asarray(row["scores"], dtype=np.float64)
        frames.append(
            compare_example(
                eid, a, received, importance, keep, special, n_permutations=cfg.n_permutations,
                top_fraction=cfg.top_fraction, rbo_p=cfg.rbo_p, seed=cfg.seed, legacy_sort=cfg.legacy_sort,
            )
        )  # fmt: skip
        per_head = head_agreement(a, received, ~special, cfg.top_fraction)
        per_head.insert(0, "example_id", eid)
        heads.append(per_head)
    seconds = time.perf_counter() - t0
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    extra = {"seconds": round(seconds, 2), "n_examples": len(examples), "deviations": list(DEVIATIONS)}
    save_parquet(frame, out_path, provenance(SIMILARITY_SCHEMA, cfg.to_dict(), cfg.seed, **extra), SIMILARITY_TYPES)
    head_frame = pd.concat(heads, ignore_index=True) if heads else pd.DataFrame()
    save_parquet(head_frame, heads_path, provenance(HEADS_SCHEMA, cfg.to_dict(), cfg.seed, **extra), HEADS_TYPES)
    logger.info("%d examples in %.1f s (%.2f s each)", len(examples), seconds, seconds / max(len(examples), 1))
    return {"n_examples": len(examples), "seconds": seconds}


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    save_csv(frame, path)


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
    _write_csv(tests, out / f"similarity_tests_all{suffix}.csv")
    _write_csv(summary, out / f"similarity_summary{suffix}.csv")
    _write_csv(legacy_means_layout(summary), out / f"similarity_means_legacy{suffix}.csv")


def missing_numbers(name: str, summary: pd.DataFrame, tests: pd.DataFrame) -> list[str]:
    """Run notes for what a dataset's tables could not compute: one line per distinct reason."""
    out = []
    for what, frame in (("dataset means", summary), ("Wilcoxon tests", tests)):
        if not len(frame) or "note" not in frame:
            continue
        for reason, count in frame.loc[frame["note"].str.startswith("not computable"), "note"].value_counts().items():
            out.append(f"{name}: {count} of {len(frame)} {what} {reason}")
    return out


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
    name = cfg.dataset_name or load_json(manifest_path, MANIFEST_SCHEMA)["name"]
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
    prov = provenance(SUMMARY_SCHEMA, cfg.to_dict(), cfg.seed, seconds=round(seconds, 2),
                      deviations=list(DEVIATIONS), notes=notes)  # fmt: skip
    for note in notes:
        logger.warning("%s", note)
    save_parquet(merged, summary_path, prov)
    logger.info("similarity tables for %s in %.1f s", ", ".join(n for n, _ in datasets), seconds)
    return {"seconds": seconds}


def run_similarity_examples(
    cfg: SimilarityConfig,
    summary_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    importance_path: StrPath,
    similarity_paths: Sequence[StrPath],
    selection_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``similarity_examples``: the in-depth view of every showcased example (§11.1)."""
    tokenizer = load_tokenizer(model_dir)
    importance = load_importance_modes(importance_path, MODES)
    selection = load_selection(selection_path)
    wanted = {e["example_id"] for e in selection}
    summaries = load_summaries(summary_paths).examples
    attributions = load_attributions(attribution_paths).set_index("example_id")
    metrics = load_similarity(similarity_paths)
    metrics = metrics[metrics["example_id"].isin(wanted)]
    written: list[Path] = []
    showcased = showcased_once(selection)
    with atomic_dir(out_dir) as tmp:
        for e, roles in showcased:
            eid = e["example_id"]
            stem = f"{file_stem(e['role'])}_{file_stem(eid)}"
            title = f"{eid} ({roles}; label {e['label']}, predicted {e['pred']})"
            ids = [int(i) for i in attributions.loc[eid, "input_ids"]]
            a = np.asarray(attributions.loc[eid, "scores"], dtype=np.float64)
            keep, special = token_masks(tokenizer, ids, cfg.legacy_mask)
            labels = display_tokens(tokenizer, ids)
            vectors = attention_vectors(summaries[eid].received.numpy(), importance)
            table = example_metrics_table(metrics[metrics["example_id"] == eid])
            caption = f"Similarity of attention (scaled by head importance) and IG attribution, {title}: value (chance)"
            written += write_table(table, Path(tmp) / f"{stem}_metrics", caption)
            page = [f"# Attention vs attribution: {markdown_cell(title)}", "", markdown_table(table, caption)]
            for mode in MODES:
                for ly in ("last", "all"):
                    for masked in (False, True):
                        mask = keep[MASKED_WITH[mode]] if masked else None
                        sets, shared, union = top_set_table(
                            labels, a, vectors[(mode, ly, True)], mode, mask, special, cfg.top_fraction, cfg.legacy_sort
                        )
                        name = f"{stem}_{mode}_{ly}_{'masked' if masked else 'unmasked'}"
                        jac = shared / union if union else float("nan")
                        what = f"{mode}, {LAYER_LABELS[ly]} (scaled), {'masked' if masked else 'unmasked'}"
                        for suffix, frame in (("top5", sets), ("counts", value_counts(sets))):
                            save_csv(frame, Path(tmp) / f"{name}_{suffix}.csv")
                            written.append(Path(tmp) / f"{name}_{suffix}.csv")
                        page += [
                            f"## Top-5 % tokens: {markdown_cell(what)}", "",
                            f"Jaccard = {shared}/{union} = {jac:.3f}", "",
                            markdown_table(value_counts(sets).head(15), "Token counts per set (15 most frequent)"),
                            markdown_table(sets, "Shared, attention-only and attribution-only positions"),
                        ]  # fmt: skip
            with atomic_path(Path(tmp) / f"{stem}.md") as out:
                out.write_text("\n".join(page), encoding="utf-8")
            write_sidecar(Path(tmp) / stem, [f"{stem}.md"])
            written.append(Path(tmp) / f"{stem}.md")
    logger.info("in-depth similarity views of %d examples", len(showcased))
    return written


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
