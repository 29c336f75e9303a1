"""IG's attributions as the paper shows them: the attribution tables and the Captum-style overlays.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attribution.artifacts import (
    l2_normalise,
    load_attributions,
    load_embedding_attributions,
)
from attnlens.classifier.selection import load_selection, outcome_text
from attnlens.data.tokens import load_vocabulary, stopword_source, structural_ids, surface_pieces, token_mask
from attnlens.io import (
    StrPath,
    atomic_dir,
    atomic_path,
    file_stem,
    load_json,
    write_csv,
    write_sidecar,
)
from attnlens.pipeline.config import (
    FiguresConfig,
)
from attnlens.pipeline.entry import stage
from attnlens.render.overlays import (
    SIGNED_SCALE,
    AttributionRecord,
    Overlay,
    hsl_to_rgb,
    render_attribution_html,
    render_png,
    signed_colour,
)
from attnlens.render.tables import (
    CONVERGENCE_CAPTION,
    MIN_OCCURRENCES,
    convergence_table,
    dataset_aggregate,
    per_type_sums,
    ranked,
    token_labels,
    top_tokens,
    write_table,
)
from attnlens.tasks import get_task

logger = logging.getLogger(__name__)


@stage("figures")
def run_attribution_tables(
    cfg: FiguresConfig,
    attribution_paths: Sequence[StrPath],
    embeddings_path: StrPath,
    selection_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``attribution_tables``: Fig 10 a–f (+ per-embedding tables), masked and unmasked."""
    tokenizer = load_vocabulary(model_dir)
    frame = load_attributions(attribution_paths)
    embeddings = load_embedding_attributions(embeddings_path)
    selection = load_selection(selection_path)
    masks = {"unmasked": "none", "masked": cfg.mask}
    written: list[Path] = []
    with atomic_dir(out_dir) as tmp:
        per_example: dict[str, list[pd.DataFrame]] = {name: [] for name in masks}
        by_id = {}
        for row in frame.itertuples(index=False):
            ids = np.asarray(row.input_ids)
            scores = l2_normalise(np.asarray(row.scores, dtype=np.float64))
            keys, shown = token_labels(tokenizer, ids, cfg.mode)
            by_id[row.example_id] = (ids, scores, keys, shown, row)
            for name, kind in masks.items():
                keep = token_mask(tokenizer, ids, kind)
                per_example[name].append(per_type_sums(scores, keys, shown, keep))
        for e in selection:
            eid = e["example_id"]
            if eid not in by_id:
                continue
            ids, scores, keys, shown, row = by_id[eid]
            what = f"{eid} ({e['role']}; {outcome_text(e)}), IG target {row.target}"
            for name, kind in masks.items():
                keep = token_mask(tokenizer, ids, kind)
                label = f"{name} (mask {kind})"
                sums = per_type_sums(scores, keys, shown, keep)
                for side, positive in (("pos", True), ("neg", False)):
                    top = top_tokens(scores, shown, keep, cfg.top_n, positive)
                    stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}_top_{side}_{name}"
                    cap = f"{what}: top {cfg.top_n} {'positive' if positive else 'negative'} tokens, {label}"
                    written += write_table(top, stem, cap)
                    agg = ranked(sums, "attribution", cfg.top_n, positive)[["token", "attribution", "occurrences"]]
                    stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}_agg_{side}_{name}"
                    written += write_table(agg, stem, f"{what}: attribution summed per token, {label}")
            if eid in embeddings:
                emb = embeddings[eid]
                table = pd.DataFrame({"position": np.arange(len(ids)), "token": shown})
                for layer, values in emb["scores"].items():
                    table[layer] = l2_normalise(values)
                table = table.reindex(table["word"].abs().sort_values(ascending=False, kind="stable").index)
                cap = (
                    f"{what}: per-embedding IG ({emb['mode']}), L2-normalised per layer, by |word|; "
                    f"completeness of the sum: delta {emb['delta']:.3g} of {emb['gap']:.3g}"
                )
                written += write_table(table.head(cfg.top_n * 2), tmp / f"{file_stem(eid)}_embeddings", cap)
        written += write_table(convergence_table(frame), tmp / "convergence", CONVERGENCE_CAPTION)
        for name, kind in masks.items():
            agg = dataset_aggregate(per_example[name])
            n = len(per_example[name])
            for side, positive in (("pos", True), ("neg", False)):
                legacy = ranked(agg, "sum_over_n", cfg.top_n, positive).drop(columns="key")
                cap = f"dataset ({n} examples): sum of per-example attribution / N, {name} (mask {kind})"
                written += write_table(legacy, tmp / f"dataset_{side}_sum_over_n_{name}", cap)
                frequent = agg[agg["occurrences"] >= MIN_OCCURRENCES]
                mean = ranked(frequent, "mean_per_occurrence", cfg.top_n, positive).drop(columns="key")
                cap = (
                    f"dataset ({n} examples): mean attribution per occurrence (tokens seen >= {MIN_OCCURRENCES} "
                    f"times), {name} (mask {kind}; stopwords: {stopword_source()})"
                )
                written += write_table(mean, tmp / f"dataset_{side}_mean_{name}", cap)
    logger.info("wrote %d table files for %d examples", len(written), len(frame))
    return [Path(out_dir) / p.name for p in written]


@stage("figures")
def run_attribution_overlays(
    cfg: FiguresConfig,
    attribution_paths: Sequence[StrPath],
    selection_path: StrPath,
    model_dir: StrPath,
    manifest_path: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``attribution_overlays``: Fig 9 for every showcased example (HTML + PNG + CSV)."""
    tokenizer = load_vocabulary(model_dir)
    frame = load_attributions(attribution_paths).set_index("example_id")
    special = structural_ids(tokenizer)
    manifest = load_json(manifest_path)
    task = get_task(manifest.get("task"))
    names = list(task.output_names(manifest["classes"]))
    written: list[Path] = []
    with atomic_dir(out_dir) as tmp:
        for e in load_selection(selection_path):
            eid = e["example_id"]
            row = frame.loc[eid]
            ids = [int(i) for i in row["input_ids"]]
            raw = tokenizer.convert_ids_to_tokens(ids)
            pieces = surface_pieces(tokenizer, raw)
            tokens = [f"#{t.strip('<>[]')}" if i in special else p[0] for i, t, p in zip(ids, raw, pieces, strict=True)]
            outcome = task.outcome(row["label"], row["probs"], int(row["target"]), names)
            rec = AttributionRecord(
                example_id=eid,
                tokens=tokens,
                starts_word=[p[1] or i in special for i, p in zip(ids, pieces, strict=True)],
                scores=l2_normalise(np.asarray(row["scores"], dtype=np.float64)),
                true_label=outcome.label,
                pred_label=outcome.prediction,
                pred_prob=outcome.confidence,
                attr_label=outcome.explained,
                delta=float(row["delta"]),
                n_steps=int(row["n_steps"]),
            )
            stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}"
            with atomic_path(stem.with_suffix(".html")) as out:
                out.write_text(render_attribution_html(rec), encoding="utf-8")
            table = pd.DataFrame({"position": np.arange(len(ids)), "token": tokens, "attribution_l2": rec.scores})
            with atomic_path(stem.with_suffix(".csv")) as out:
                write_csv(table, out)
            write_sidecar(stem, [stem.with_suffix(".html").name, stem.with_suffix(".csv").name])
            overlay = Overlay(
                tokens=tokens,
                starts_word=rec.starts_word,
                values=rec.scores,
                special=np.zeros(len(ids), dtype=bool),
                title=f"{eid} ({e['role']}): integrated gradients toward {rec.attr_label}",
                note="",
            )
            colours = [hsl_to_rgb(*signed_colour(a)) for a in rec.scores]
            subtitle = (
                f"true {rec.true_label} | predicted {rec.predicted} | attribution label "
                f"{rec.attr_label} | attribution score {rec.attr_score:.2f} | "
                f"{rec.n_steps} steps, delta {rec.delta:.2g} | {SIGNED_SCALE}"
            )
            render_png(overlay, stem.with_suffix(".png"), cfg.dpi, colours=colours, subtitle=subtitle)
            written += [stem.with_suffix(s) for s in (".html", ".csv", ".png")]
    return [Path(out_dir) / p.name for p in written]
