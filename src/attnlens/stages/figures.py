"""Rules of ``workflow/rules/figures.smk``: the attention stage's figures, top-k tables and overlays, and the
explorer pages — the views that read attention bands and token ids through the model's tokenizer."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attnlens.attention.band import bin_cells, binned_image, layer_configuration
from attnlens.attention.summaries import TOPK_COLUMNS, count_topk, intersect_counts, load_bands, load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations, scores_by_example
from attnlens.attribution.methods import method_names
from attnlens.attribution.ranking_faithfulness import example_evidence
from attnlens.classifier.importance import IMPORTANCE_SCHEMA, head_labels, load_importance, zero_heads
from attnlens.classifier.prediction import encode_examples
from attnlens.classifier.selection import SELECTION_SCHEMA, load_selection, outcome_text, role_left_out
from attnlens.data.sources import load_examples
from attnlens.data.tokens import display_tokens, stopword_source, token_mask
from attnlens.errors import InputError
from attnlens.io import (
    StrPath,
    artifact_provenance,
    atomic_dir,
    atomic_path,
    file_stem,
    load_json,
    load_tensors,
    provenance,
    save_csv,
    save_tensors,
)
from attnlens.models.checkpoints import load_tokenizer
from attnlens.pipeline.config import ExplorerConfig, FiguresConfig
from attnlens.pipeline.entry import stage
from attnlens.render.explorer import EXPLORER_SCHEMA, document_for, payload, render_explorer
from attnlens.render.figures import (
    plot_attention_grid,
    plot_head_importance,
    plot_intersections,
    plot_skipped,
    plot_token_occurrences,
    plot_topk_counts,
)
from attnlens.render.overlays import build_overlay, write_overlay
from attnlens.tasks import get_task

log = logging.getLogger(__name__)


@stage("figures")
def run_plot_head_importance(cfg: FiguresConfig, importance_path: StrPath, figure_stem: StrPath) -> list[Path]:
    """Rule ``plot_head_importance``: legacy and fixed matrices and, where the global rows have projections of
    their own (Longformer), their share."""
    t, prov = load_tensors(importance_path, IMPORTANCE_SCHEMA)
    fixed_cfg = prov["config"]
    has_global = bool((prov.get("head_groups") or {"global": [True]})["global"])  # older artifacts: Longformer's
    matrices = {
        "legacy (T3-vis: summed gradients, local only, min-max)": t["legacy"].numpy(),
        f"fixed ({fixed_cfg['estimator']}, {'local + global' if has_global else 'all projections'}, "
        f"{fixed_cfg['normalisation']})": t["fixed"].numpy(),
    }
    if has_global:
        total = (t["fixed_local"] + t["fixed_global"]).numpy()
        share = np.divide(t["fixed_global"].numpy(), total, out=np.zeros_like(total), where=total > 0)
        matrices["fixed: share from global projections"] = share
    return plot_head_importance(matrices, figure_stem, cfg.dpi)


@stage("figures")
def run_plot_attention(
    cfg: FiguresConfig,
    bins: int,
    summary_paths: Sequence[StrPath],
    band_paths: Sequence[StrPath],
    selection_path: StrPath,
    heatmap_dir: StrPath,
    aggregate_stem: StrPath,
    aggregate_path: StrPath,
) -> None:
    """Rule ``plot_attention``: per showcased example (Fig 2 / 4a) and dataset aggregate (Fig 4b) grids."""
    summaries = load_summaries(summary_paths)
    count = summaries.position_count
    n_max = len(count)
    cells = bin_cells([n_max], bins, n_max).numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = summaries.aggregate.numpy() / cells
    n = len(summaries.examples)
    plot_attention_grid(
        mean,
        aggregate_stem,
        f"mean attention over {n} test examples (each cell over the examples where both tokens are real)",
        cfg.heatmap_scale,
        cfg.dpi,
    )
    prov = provenance("attention_aggregate/v1", cfg.to_dict(), None, n_examples=n, n_max=n_max, bins=bins)
    save_tensors({"mean": torch.from_numpy(mean).float(), "position_count": count}, aggregate_path, prov)
    selection = load_selection(selection_path)
    seen = set()
    with atomic_dir(heatmap_dir) as tmp:
        for e in selection:
            eid = e["example_id"]
            if eid in seen:
                continue
            seen.add(eid)
            bands, _ = load_bands(band_paths, eid)
            length = bands[0].length
            images = torch.stack([binned_image(b, bins) for b in bands]).double().numpy()
            own = bin_cells([length], bins, length).numpy()
            with np.errstate(invalid="ignore", divide="ignore"):
                images = np.where(own > 0, images / own, np.nan)
            roles = ", ".join(x["role"] for x in selection if x["example_id"] == eid)
            title = f"example {eid} ({roles}; {outcome_text(e)}; {length} tokens)"
            plot_attention_grid(images, tmp / file_stem(eid), title, cfg.heatmap_scale, cfg.dpi)


@stage("figures")
def run_count_topk(
    cfg: FiguresConfig,
    summary_paths: Sequence[StrPath],
    selection_path: StrPath,
    model_dir: StrPath,
    tables_dir: StrPath,
    figures_dir: StrPath,
) -> dict:
    """Rule ``count_topk``: paper Figs 5–7 for the example of role ``cfg.topk_role``.

    A role that names no example of this run (``most_confident_1`` when no test document is predicted as
    class 1, ``most_confident_5`` with three classes) is skipped: the tables are written empty, the figures
    say why, and the run notes carry one line. An id or name that is no role at all is a config error.
    """
    document = load_json(selection_path, SELECTION_SCHEMA)
    selection = document["examples"]
    chosen = [e for e in selection if cfg.topk_role in (e["role"], e["example_id"])]
    if not chosen:
        why = role_left_out(document, cfg.topk_role)
        if why is None:
            roles = sorted({e["role"] for e in selection})
            raise InputError(
                str(selection_path),
                "figures.topk_role",
                f"expected a role {roles} or showcased id, got {cfg.topk_role!r}",
            )
        return _skip_count_topk(cfg, why, Path(tables_dir), Path(figures_dir))
    eid = chosen[0]["example_id"]
    ex = load_summaries(summary_paths).examples[eid]
    if ex.topk is None:
        raise InputError("config", "attention.topk_for", f"expected top-k tables for showcased example {eid!r}")
    tokenizer = load_tokenizer(model_dir)
    ids = ex.input_ids.tolist()
    if cfg.mask in ("alpha_stop_legacy", "alnum_legacy"):  # the original grouped by the Ġ-stripped raw token
        labels = [t.replace("Ġ", "") for t in tokenizer.convert_ids_to_tokens(ids)]
    else:
        labels = display_tokens(tokenizer, ids)
    keep = token_mask(tokenizer, ids, cfg.mask)
    tables = {}
    for kind in ("attended", "attending"):
        by_type, by_pos = count_topk(ex.topk[f"{kind}_idx"], labels, keep)
        tables[f"{kind}_by_type"], tables[f"{kind}_by_position"] = by_type, by_pos
    tables["intersection_by_type"] = intersect_counts(
        tables["attended_by_type"], tables["attending_by_type"], cfg.top_n, "token"
    )
    tables["intersection_by_position"] = intersect_counts(
        tables["attended_by_position"], tables["attending_by_position"], cfg.top_n, "position"
    )
    token = cfg.token_of_interest or (
        tables["attending_by_type"]["token"].iloc[0] if len(tables["attending_by_type"]) else ""
    )
    att = tables["attending_by_position"]
    tables["token_occurrences"] = att[att["token"] == token].reset_index(drop=True)
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    for name, table in tables.items():
        save_csv(table, tables_dir / f"topk_{name}.csv")
    k = ex.topk["attended_idx"].shape[-1]
    title = f"example {eid} ({cfg.topk_role}), top-{k} partners over all layers and heads, mask {cfg.mask}"
    plot_topk_counts(tables, figures_dir / "topk_counts", cfg.top_n, title, cfg.dpi)
    plot_intersections(
        tables["intersection_by_type"],
        tables["intersection_by_position"],
        figures_dir / "topk_intersections",
        title,
        cfg.dpi,
    )
    plot_token_occurrences(tables["token_occurrences"], token, figures_dir / "topk_token_occurrences", title, cfg.dpi)
    log.info("top-k counts of %s with mask %s (stopwords: %s)", eid, cfg.mask, stopword_source())
    return {"example_id": eid, "token_of_interest": token}


def _skip_count_topk(cfg: FiguresConfig, why: str, tables_dir: Path, figures_dir: Path) -> dict:
    note = f"figures.topk_role {cfg.topk_role} names no example of this run ({why}): top-k figures and tables skipped"
    log.warning("%s", note)
    prov = {**artifact_provenance("table"), "notes": [note]}
    for name, columns in TOPK_COLUMNS.items():
        save_csv(pd.DataFrame(columns=list(columns)), tables_dir / f"topk_{name}.csv", prov)
    for stem in ("topk_counts", "topk_intersections", "topk_token_occurrences"):
        plot_skipped(figures_dir / stem, f"top-k partners of role {cfg.topk_role}", why, cfg.dpi, [note])
    return {"example_id": None, "token_of_interest": None, "skipped": note}


@stage("figures")
def run_render_overlays(
    cfg: FiguresConfig,
    summary_paths: Sequence[StrPath],
    selection_path: StrPath,
    importance_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``render_overlays``: every showcased example × ``cfg.overlay_layers`` × {unscaled, scaled}."""
    summaries = load_summaries(summary_paths)
    tokenizer = load_tokenizer(model_dir)
    importance = load_importance(importance_path, cfg.mode)
    zeros = zero_heads(importance)
    if zeros:
        log.warning("%s head importance is 0 for %s: scaled overlays drop them", cfg.mode, head_labels(zeros))
    roles: dict[str, list[str]] = {}
    info: dict[str, dict] = {}
    for e in load_selection(selection_path):
        roles.setdefault(e["example_id"], []).append(e["role"])
        info[e["example_id"]] = e
    written: list[Path] = []
    with atomic_dir(out_dir) as tmp:
        for eid, example_roles in roles.items():
            ex = summaries.examples[eid]
            e = info[eid]
            for layers in cfg.overlay_layers:
                for scaled in (False, True):
                    values = layer_configuration(ex.received, layers, importance if scaled else None)
                    scaling = (
                        f"scaled by the {cfg.mode} head importance ({importance_path}; zero heads {head_labels(zeros)})"
                        if scaled
                        else "unscaled"
                    )
                    title = (
                        f"{eid} ({', '.join(example_roles)}; {outcome_text(e)}): "
                        f"received attention, {layers} layer{'s' if layers != 'last' else ''}, {scaling.split(' (')[0]}"
                    )
                    note = f"layer configuration {layers}; {scaling}"
                    overlay = build_overlay(tokenizer, ex.input_ids, values.numpy(), title, note)
                    name = f"{file_stem(eid)}_{layers}_{'scaled' if scaled else 'unscaled'}"
                    written += write_overlay(overlay, tmp / name, cfg.dpi)
    return [Path(out_dir) / p.name for p in written]


def _target_evidence(
    task, rationales: pd.DataFrame, encoded, index: int, ids: list[int], eid: str, target: int
) -> np.ndarray | None:
    """The tokens of a document's planted evidence for its explained output ``target`` (:meth:`Task.evidence`), or
    ``None`` where the corpus plants none (``encoded``: the test examples', ``index``: this one's)."""
    if not len(rationales):
        return None
    rows = task.evidence(rationales, target)
    spans = rows.loc[rows["example_id"] == eid, ["char_start", "char_end"]]
    return example_evidence(encoded, index, ids, [tuple(s) for s in spans.to_numpy()], eid)


@stage("report.explorer")
def run_build_explorers(
    cfg: ExplorerConfig,
    bands_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    importance_path: StrPath,
    selection_path: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    manifest_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
    explanation_paths: Sequence[StrPath] = (),
) -> list[Path]:
    """Rule ``build_explorers``: ``<role>_<example>.html`` for every showcased example (one page per example),
    with one overlay per explanation method when the ``explain`` shards are given."""
    tokenizer = load_tokenizer(model_dir)
    selection = load_selection(selection_path)
    importance = load_importance(importance_path, cfg.importance)
    every = load_attributions(attribution_paths, every_target=True)  # headline first, then the other targets
    targets_of = {str(e): [row for _, row in rows.iterrows()] for e, rows in every.groupby("example_id", sort=False)}
    examples, _ = load_examples(test_path)
    rationales = pd.read_parquet(rationales_path)
    manifest = load_json(manifest_path)
    task = get_task(manifest.get("task"))
    shown = examples[examples["example_id"].astype(str).isin({e["example_id"] for e in selection})]
    encoded = encode_examples(tokenizer, shown, task)  # the showcased examples' offsets, for their evidence
    shown_row = {str(e): i for i, e in enumerate(shown["example_id"])}
    class_names = list(task.output_names(manifest["classes"]))
    explained = scores_by_example(load_explanations(explanation_paths), method_names()) if explanation_paths else {}
    roles: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for e in selection:
        roles.setdefault(e["example_id"], []).append(e["role"])
        first.setdefault(e["example_id"], e)
    prov = provenance(EXPLORER_SCHEMA, cfg.to_dict(), None)
    prov.pop("created")
    written = []
    with atomic_dir(out_dir) as tmp:
        for eid, example in first.items():
            bands, ids = load_bands(bands_paths, eid)
            ids = [int(i) for i in ids]
            rows = targets_of[eid]
            evidence = [
                _target_evidence(task, rationales, encoded, shown_row[eid], ids, eid, int(row["target"]))
                for row in rows
            ]
            others = list(zip(rows[1:], evidence[1:], strict=True))
            doc = document_for(
                example,
                roles[eid],
                bands,
                ids,
                rows[0],
                importance,
                tokenizer,
                class_names,
                evidence[0],
                cfg.top_k,
                prov,
                explained.get(eid),
                task=task,
                other_targets=others,
            )
            meta, blob = payload(doc)
            name = f"{file_stem(eid)}.html"
            with atomic_path(tmp / name) as out:
                out.write_text(render_explorer(meta, blob), encoding="utf-8")
            size = (tmp / name).stat().st_size
            log.info(
                "%s: %d tokens, %d views, top-%d: %.2f MB",
                eid,
                len(ids),
                len(doc.views.received),
                cfg.top_k,
                size / 1e6,
            )
            written.append(Path(out_dir) / name)
    return written
