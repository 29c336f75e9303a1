"""Rules of ``workflow/rules/attribution.smk``: IG shards and per-embedding IG (their tables and overlays:
:mod:`attnlens.stages.report`)."""

from __future__ import annotations

import logging
import time
from functools import partial

import numpy as np
import pandas as pd

from attnlens.attribution.artifacts import (
    ATTRIBUTION_COLUMNS,
    ATTRIBUTION_SCHEMA,
    EMBEDDING_LAYERS,
    EMBEDDING_SCHEMA,
    EMBEDDING_TYPES,
    attribution_types,
)
from attnlens.attribution.ig import (
    attribute_configured,
    attribution_row,
    configured_batch,
    embedding_ig,
    predicted_outputs,
    prepare_inputs,
)
from attnlens.classifier.prediction import encode_examples
from attnlens.classifier.selection import load_selection
from attnlens.data.sources import load_examples
from attnlens.device import batch_size, place, precision_name, synchronize
from attnlens.io import (
    StrPath,
    provenance,
    save_parquet,
)
from attnlens.models import architecture
from attnlens.models.checkpoints import load_classifier
from attnlens.pipeline.config import AttributionConfig
from attnlens.pipeline.entry import stage
from attnlens.pipeline.resume import Resumable
from attnlens.sharding import shard_positions
from attnlens.tasks import task_of

logger = logging.getLogger(__name__)


#: IG's internal batch of a job without examples (nothing runs with it).
NO_EXAMPLE = (1, {"how": "no example in the job"})


@stage("attribution")
def run_attribute(
    cfg: AttributionConfig,
    model_dir: StrPath,
    test_path: StrPath,
    predictions_path: StrPath,
    selection_path: StrPath,
    shard: int,
    out_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``attribute``: IG for every test example of one shard → parquet, one row per example and explained
    target (the task's :meth:`~attnlens.tasks.Task.targets` of ``attribution.target``).

    Each finished (example, target) is checkpointed under ``.<out>.partial/``, keyed by a fingerprint of the
    config section and of every input file (path, size, mtime), so a shard killed midway resumes
    where it stopped and never from another model's results; the checkpoint folder is removed once
    the shard's parquet is written.
    """
    model, tokenizer = load_classifier(model_dir)
    model_device = place(model, device)
    examples, _ = load_examples(test_path)
    task = task_of(model.config)
    outputs_by_id = predicted_outputs(predictions_path, task)
    showcased = {e["example_id"] for e in load_selection(selection_path)}
    encoded = encode_examples(tokenizer, examples, task)
    ids = [str(e) for e in examples["example_id"]]
    mine = shard_positions(ids, cfg.n_shards, shard)
    units = Resumable.beside(out_path, cfg.to_dict(), [model_dir, test_path, predictions_path, selection_path])
    internal = NO_EXAMPLE  # IG's batch, measured on the job's longest example where it is auto on a card
    if mine:
        i = max(mine, key=lambda i: len(encoded.input_ids[i]))
        target = next(iter(task.targets(cfg.target, examples["label"].iloc[i], outputs_by_id[ids[i]])), 0)
        longest = prepare_inputs(model, tokenizer, encoded.input_ids[i], model_device)
        internal = configured_batch(cfg, model, longest, target)
    t0 = time.perf_counter()
    rows = []
    for i in mine:
        label, outputs = examples["label"].iloc[i], outputs_by_id[ids[i]]
        rows += _attribute_example(
            cfg, model, tokenizer, model_device, ids[i], encoded.input_ids[i], label, outputs, ids[i] in showcased,
            internal[0], units,
        )  # fmt: skip
    resumed = units.resumed
    seconds = time.perf_counter() - t0
    frame = pd.DataFrame(rows, columns=list(ATTRIBUTION_COLUMNS))
    n_bad, notes = _not_converged(frame, cfg, shard)
    prov = provenance(
        ATTRIBUTION_SCHEMA,
        cfg.to_dict(),
        None,
        shard=shard,
        n_shards=cfg.n_shards,
        model=str(model_dir),
        device=str(model_device),
        seconds=round(seconds, 2),
        resumed_examples=resumed,
        not_converged=n_bad,
        internal_batch=internal[1],
        precision=precision_name(model_device, cfg.autocast),
        notes=notes,
    )
    save_parquet(frame, out_path, prov, attribution_types(task))
    units.finish()
    logger.info(
        "shard %d/%d: %d examples (%d resumed, %d not converged) in %.1f s",
        shard,
        cfg.n_shards,
        len(frame),
        resumed,
        n_bad,
        seconds,
    )
    return {"n_examples": len(frame), "seconds": seconds, "not_converged": n_bad, "resumed": resumed}


def _attribute_example(
    cfg: AttributionConfig, model, tokenizer, device, eid: str, input_ids, label, outputs, showcased: bool, batch: int,
    units: Resumable,
) -> list[dict]:  # fmt: skip
    """IG's rows of one example, one per target it explains; a target a killed run of the job finished is read back."""
    task = task_of(model.config)
    inputs = []  # prepared once, for the first target not read back

    def one(rank: int, target: int) -> list[dict]:
        if not inputs:
            inputs.append(prepare_inputs(model, tokenizer, input_ids, device))
        started = time.perf_counter()
        res = attribute_configured(cfg, model, inputs[0], target, batch, showcased)
        synchronize(device)
        row = attribution_row(eid, input_ids, res, label, cfg.target, showcased, time.perf_counter() - started, rank)
        logger.info(
            "%s (target %d): %d tokens, %d steps, |δ|/|gap| = %.4f%s",
            eid,
            target,
            len(input_ids),
            res.n_steps,
            row["relative_delta"],
            "" if res.converged else " (NOT converged)",
        )
        return [row]

    targets = enumerate(task.targets(cfg.target, label, outputs))
    return [row for rank, target in targets for row in units.rows((eid, target), partial(one, rank, target))]


def _not_converged(frame: pd.DataFrame, cfg: AttributionConfig, shard: int) -> tuple[int, list[str]]:
    """How many of a shard's explanations miss IG's tolerance, and the run note that says so."""
    n_bad = int((~frame["converged"].astype(bool)).sum()) if len(frame) else 0
    if not n_bad:
        return 0, []
    return n_bad, [
        f"IG: {n_bad} of {len(frame)} explanations of shard {shard} miss the tolerance |δ| ≤ {cfg.tolerance}·|gap| "
        f"(worst |δ|/|gap| = {frame['relative_delta'].max():.3f}); see paper/tables/attributions/convergence.csv"
    ]


@stage("attribution")
def run_attribute_embeddings(
    cfg: AttributionConfig,
    model_dir: StrPath,
    test_path: StrPath,
    predictions_path: StrPath,
    selection_path: StrPath,
    out_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``attribute_embeddings``: per-embedding IG (§9.2) of every showcased example, for its headline target
    → parquet."""
    model, tokenizer = load_classifier(model_dir)
    model_device = place(model, device)
    examples, _ = load_examples(test_path)
    task = task_of(model.config)
    outputs_by_id = predicted_outputs(predictions_path, task)
    row_of = {str(e): i for i, e in enumerate(examples["example_id"])}
    showcased = list(dict.fromkeys(e["example_id"] for e in load_selection(selection_path)))
    encoded = {eid: encode_examples(tokenizer, examples.iloc[[row_of[eid]]], task).input_ids[0] for eid in showcased}
    internal = NO_EXAMPLE
    if showcased:
        eid = max(showcased, key=lambda eid: len(encoded[eid]))
        target = next(iter(task.targets(cfg.target, examples["label"].iloc[row_of[eid]], outputs_by_id[eid])), 0)
        inputs = prepare_inputs(model, tokenizer, encoded[eid], model_device)
        internal = batch_size(
            cfg.steps_per_pass,
            model_device,
            lambda steps: embedding_ig(model, inputs, target, steps, steps, cfg.embeddings_mode),
            cfg.embeddings_steps,
            "IG's internal batch",
        )
    rows = []
    t0 = time.perf_counter()
    for eid in showcased:
        label = examples["label"].iloc[row_of[eid]]
        target = task.targets(cfg.target, label, outputs_by_id[eid])[0]  # the headline target's
        inputs = prepare_inputs(model, tokenizer, encoded[eid], model_device)
        rows.append(_embedding_row(cfg, eid, encoded[eid], target, embedding_ig(
            model, inputs, target, cfg.embeddings_steps, internal[0], cfg.embeddings_mode
        )))  # fmt: skip
    seconds = time.perf_counter() - t0
    frame = pd.DataFrame(rows)
    missed = [r for r in rows if not r["converged"]]
    notes = _embedding_notes(cfg, missed, len(rows), architecture(model).embedding_layers(model))
    deviations = [] if cfg.embeddings_mode == "legacy" else ["B-14"]
    prov = provenance(
        EMBEDDING_SCHEMA,
        cfg.to_dict(),
        None,
        seconds=round(seconds, 2),
        deviations=deviations,
        not_converged=len(missed),
        internal_batch=internal[1],
        notes=notes,
    )
    save_parquet(frame, out_path, prov, EMBEDDING_TYPES)
    return {"n_examples": len(frame), "seconds": seconds}


def _embedding_row(cfg: AttributionConfig, eid: str, ids, target: int, res: dict) -> dict:
    """One showcased example's per-embedding IG row, its convergence logged."""
    relative = abs(res["delta"]) / max(abs(res["gap"]), 1e-12)
    converged = cfg.tolerance is None or abs(res["delta"]) <= cfg.tolerance * abs(res["gap"])
    logger.log(
        logging.INFO if converged else logging.WARNING,
        "%s: per-embedding IG, delta %.3g of %.3g (|δ|/|gap| = %.3f)%s",
        eid,
        res["delta"],
        res["gap"],
        relative,
        "" if converged else f" NOT within the tolerance {cfg.tolerance} at {cfg.embeddings_steps} steps",
    )
    return {
        "example_id": eid,
        "input_ids": np.asarray(ids, dtype=np.int32),
        "mode": cfg.embeddings_mode,
        "target": target,
        "word": res["word"],
        "position": res.get("position"),
        "token_type": res.get("token_type"),
        "delta": res["delta"],
        "gap": res["gap"],
        "relative_delta": relative,
        "converged": converged,
    }


def _embedding_notes(cfg: AttributionConfig, missed: list[dict], n: int, present) -> list[str]:
    """The run notes of per-embedding IG: examples that miss the tolerance, embeddings the model does not have."""
    notes = []
    if missed:
        notes.append(
            f"per-embedding IG: {len(missed)} of {n} showcased examples miss the tolerance "
            f"|δ| ≤ {cfg.tolerance}·|gap| at attribution.embeddings_steps = {cfg.embeddings_steps} (worst "
            f"|δ|/|gap| = {max(r['relative_delta'] for r in missed):.3f}); raise embeddings_steps"
        )
    wanted = EMBEDDING_LAYERS if cfg.embeddings_mode == "legacy" else ("word", "position")
    absent = [name for name in wanted if name not in present]
    if absent:
        notes.append(
            f"per-embedding IG: the model has no {' or '.join(absent)} embeddings (e.g. rotary positions); "
            f"it attributes to the ones it has"
        )
    return notes
