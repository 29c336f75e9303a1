"""Rules of ``workflow/rules/similarity.smk``: per-shard comparison and the showcased examples' tables (the dataset
tables and figures: :mod:`attnlens.stages.report`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attention.summaries import load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations
from attnlens.attribution.methods import REFERENCE, method_names
from attnlens.attribution.ranking_faithfulness import evidence_labels
from attnlens.classifier.importance import load_importance_modes
from attnlens.classifier.prediction import encode_examples
from attnlens.classifier.selection import load_selection, outcome_text, showcased_once
from attnlens.data.sources import MANIFEST_SCHEMA as SPLIT_MANIFEST_SCHEMA
from attnlens.data.sources import load_examples
from attnlens.data.tokens import display_tokens, structural_mask
from attnlens.errors import InputError
from attnlens.io import (
    StrPath,
    atomic_dir,
    atomic_path,
    file_stem,
    load_json,
    provenance,
    save_csv,
    save_parquet,
    write_sidecar,
)
from attnlens.models.checkpoints import load_tokenizer, model_architecture
from attnlens.pipeline.config import FiguresConfig, SimilarityConfig
from attnlens.pipeline.entry import stage
from attnlens.render.escape import markdown_cell
from attnlens.render.figures import plot_target_agreement
from attnlens.render.tables import example_metrics_table, markdown_table, write_table
from attnlens.similarity.metrics import (
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
from attnlens.similarity.paper import (
    LAYER_LABELS,
    MASKED_WITH,
    top_set_table,
    value_counts,
)
from attnlens.similarity.per_target import PAIR_COLUMNS, pair_agreement, target_agreement, target_sensitivity
from attnlens.similarity.regions import ROW_COLUMNS as REGION_ROWS
from attnlens.similarity.regions import query_attention_table, query_rows, region_masks
from attnlens.tasks import get_task

logger = logging.getLogger(__name__)


@stage("similarity")
def run_compare(
    cfg: SimilarityConfig,
    summary_path: StrPath,
    attribution_paths: Sequence[StrPath],
    importance_path: StrPath,
    model_dir: StrPath,
    out_path: StrPath,
    heads_path: StrPath,
) -> dict:
    """Rule ``compare``: metrics of every example of one attention shard against each of its explained targets'
    attributions, and per-head agreement (of the headline target)."""
    tokenizer = load_tokenizer(model_dir)
    importance = load_importance_modes(importance_path, MODES)
    examples = load_summaries([summary_path]).examples
    attributions = load_attributions(attribution_paths, every_target=True)
    by_example = {eid: rows for eid, rows in attributions.groupby("example_id", sort=False)}
    frames, heads = [], []
    t0 = time.perf_counter()
    for eid, ex in examples.items():
        if eid not in by_example:
            raise InputError(", ".join(map(str, attribution_paths)), "example_id", f"expected an attribution of {eid}")
        received = ex.received.numpy()
        rows = by_example[eid]
        ids = [int(i) for i in rows["input_ids"].iloc[0]]  # every target of a document: its one token sequence
        if ex.input_ids.tolist() != ids:
            raise InputError(summary_path, "input_ids", f"expected the attributed token ids of {eid}")
        keep, special = token_masks(tokenizer, ids, cfg.legacy_mask)
        for row in rows.itertuples(index=False):
            a = np.asarray(row.scores, dtype=np.float64)
            frame = compare_example(
                eid,
                a,
                received,
                importance,
                keep,
                special,
                n_permutations=cfg.n_permutations,
                top_fraction=cfg.top_fraction,
                rbo_p=cfg.rbo_p,
                seed=cfg.seed,
                legacy_sort=cfg.legacy_sort,
                target=int(row.target),
                target_rank=int(row.target_rank),
            )
            frames.append(frame)
            if row.target_rank == 0:  # per-head agreement: of the headline target
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


@stage("similarity")
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
            title = f"{eid} ({roles}; {outcome_text(e)})"
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
                            f"## Top-5 % tokens: {markdown_cell(what)}",
                            "",
                            f"Jaccard = {shared}/{union} = {jac:.3f}",
                            "",
                            markdown_table(value_counts(sets).head(15), "Token counts per set (15 most frequent)"),
                            markdown_table(sets, "Shared, attention-only and attribution-only positions"),
                        ]
            with atomic_path(Path(tmp) / f"{stem}.md") as out:
                out.write_text("\n".join(page), encoding="utf-8")
            write_sidecar(Path(tmp) / stem, [f"{stem}.md"])
            written.append(Path(tmp) / f"{stem}.md")
    logger.info("in-depth similarity views of %d examples", len(showcased))
    return written


def _pairs_of(frame: pd.DataFrame, tokenizer, cfg: SimilarityConfig, task) -> pd.DataFrame:
    """:func:`~attnlens.similarity.per_target.pair_agreement` rows of every document of ``frame`` (attribution or
    explanation rows of every target: ``example_id``, ``input_ids``, ``target``, ``scores``) with two targets or
    more, over the tokens the fixed mask keeps; targets as the task groups them."""
    pairs = []
    for eid, rows in frame.groupby("example_id", sort=True):
        if len(rows) < 2:
            continue
        ids = [int(i) for i in rows["input_ids"].iloc[0]]
        keep, special = token_masks(tokenizer, ids, cfg.legacy_mask)
        scores = {int(t): np.asarray(s, dtype=np.float64) for t, s in zip(rows["target"], rows["scores"], strict=True)}
        pairs.append(pair_agreement(str(eid), scores, keep["fixed"] & ~special, cfg.rbo_p, cfg.top_fraction))
    out = pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame(columns=list(PAIR_COLUMNS))
    for column in ("target", "other"):
        out[column] = out[column].map(task.target_group)
    return out


@stage("similarity", "figures")
def run_target_agreement(
    cfg: SimilarityConfig,
    figures_cfg: FiguresConfig,
    similarity_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    manifest_path: StrPath,
    model_dir: StrPath,
    table_stem: StrPath,
    figure_stem: StrPath,
    sensitivity_stem: StrPath,
    explanation_paths: Sequence[StrPath] = (),
) -> dict:
    """Rule ``target_agreement``: per explained output, how well the one attention map agrees with its attribution
    (the ``compare`` rows of every target), against chance and against the other explained outputs' attributions
    of the same documents (:mod:`attnlens.similarity.per_target`); and per method, how much its explanations of one
    document's targets agree with each other (IG's; every method's where ``explanation_paths`` hold every
    target's explanations, ``explanations.targets: every``)."""
    tokenizer = load_tokenizer(model_dir)
    manifest = load_json(manifest_path, SPLIT_MANIFEST_SCHEMA)
    task = get_task(manifest.get("task"))
    names = task.target_names(manifest["classes"])
    similarity = load_similarity(similarity_paths, every_target=True)
    similarity["target"] = similarity["target"].map(task.target_group)  # a QA run's spans: one answer span
    attributions = load_attributions(attribution_paths, every_target=True)
    pair_frame = _pairs_of(attributions, tokenizer, cfg, task)
    table = target_agreement(similarity, pair_frame, names, cfg.seed, cfg.n_boot)
    n_docs = int(attributions["example_id"].nunique()) if len(attributions) else 0
    caption = (
        f"Per-target agreement over {n_docs} documents and {len(attributions)} explanations: attention (fixed "
        "recipe, scaled by head importance) vs each explained output's IG attribution, mean [95 % CI over "
        "documents] and chance; and each output's attribution vs the other explained outputs' attributions of the "
        "same documents"
    )
    write_table(table, table_stem, caption)
    plot_target_agreement(table, figure_stem, figures_cfg.dpi)
    by_method = {REFERENCE: pair_frame}
    if explanation_paths:
        explained = load_explanations(explanation_paths, every_target=True)
        for method in sorted(explained["method"].unique(), key=method_names().index):
            by_method[str(method)] = _pairs_of(explained[explained["method"] == method], tokenizer, cfg, task)
    sensitivity = target_sensitivity(by_method, cfg.seed, cfg.n_boot)
    write_table(
        sensitivity,
        sensitivity_stem,
        "Target sensitivity: how much each method's explanations of one "
        "document's explained outputs agree with each other (fixed recipe's metrics over the kept tokens), "
        "mean [95 % CI over documents]; 1 = one explanation whatever the output",
    )
    logger.info(
        "per-target agreement: %d targets, %d documents, %d pairs; %d methods' target sensitivity",
        table["target"].nunique() - 1,
        n_docs,
        len(pair_frame),
        len(by_method),
    )
    return {"n_documents": n_docs, "n_pairs": len(pair_frame)}


@stage("similarity")
def run_query_attention(
    cfg: SimilarityConfig,
    summary_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    test_path: StrPath,
    rationales_path: StrPath,
    manifest_path: StrPath,
    model_dir: StrPath,
    table_stem: StrPath,
) -> dict:
    """Rule ``query_attention``: where each query group's attention goes (:meth:`attnlens.tasks.Task.query_groups`:
    ``[CLS]``; a question's and its answer's tokens), region by region of each test document
    (:meth:`~attnlens.tasks.Task.regions` of its planted phrases, the query groups' own tokens, special tokens, the
    rest), beside the share of its headline IG attribution's mass (:mod:`attnlens.similarity.regions`)."""
    tokenizer = load_tokenizer(model_dir)
    task = get_task(load_json(manifest_path, SPLIT_MANIFEST_SCHEMA).get("task"))
    arch = model_architecture(model_dir)
    examples, _ = load_examples(test_path)
    encoded = encode_examples(tokenizer, examples, task)  # each token's characters, for the planted phrases
    row_of = {str(e): i for i, e in enumerate(examples["example_id"])}
    rationales = pd.read_parquet(rationales_path)
    summaries = load_summaries(summary_paths).examples
    rows = []
    for r in load_attributions(attribution_paths).itertuples(index=False):
        eid, i = str(r.example_id), row_of[str(r.example_id)]
        ids = encoded.input_ids[i]
        if [int(t) for t in r.input_ids] != ids or summaries[eid].input_ids.tolist() != ids:
            raise ValueError(f"{eid}: attention, attribution and the test split saw different token ids")
        groups = task.query_groups(examples["label"].iloc[i], encoded, i, arch.readout(len(ids)))
        named = {name: rows_ for name, rows_ in groups.items() if rows_.any()}
        for name, spans in task.regions(rationales[rationales["example_id"] == eid]).items():
            named[name] = evidence_labels(
                encoded.offsets[i], list(zip(spans["char_start"], spans["char_end"], strict=True))
            )
        masks = region_masks(named, structural_mask(tokenizer, ids))
        for group, attention in summaries[eid].queries.items():
            rows += query_rows(eid, group, attention.numpy(), np.asarray(r.scores), masks)
    frame = pd.DataFrame(rows, columns=list(REGION_ROWS))
    table = query_attention_table(frame, cfg.seed, cfg.n_boot)
    n_docs = int(frame["example_id"].nunique()) if len(frame) else 0
    caption = (
        f"Where attention goes, over {n_docs} test documents: per query group (the tokens the head reads) and layer "
        "configuration (heads averaged), each region's share of the group's attention and of the IG attribution's "
        "mass (mean [95 % CI over documents]), the region's share of the tokens, and attention minus attribution, "
        "paired by document"
    )
    write_table(table, table_stem, caption)
    logger.info(
        "query attention: %d documents, %d groups, %d regions",
        n_docs,
        frame["group"].nunique(),
        frame["region"].nunique(),
    )
    return {"n_documents": n_docs}
