"""Rules of ``workflow/rules/topology.smk``: persistence diagrams and bottleneck distances (the figures:
:mod:`attnlens.stages.report`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.attention.layers import layer_slice
from attnlens.classifier.prediction import encode_examples
from attnlens.data.sources import load_examples
from attnlens.data.tokens import display_tokens, structural_mask
from attnlens.device import place
from attnlens.io import (
    StrPath,
    provenance,
    save_json,
    save_parquet,
    save_tensors,
)
from attnlens.models import architecture, forward_bands
from attnlens.models.checkpoints import load_classifier
from attnlens.pipeline.config import TopologyConfig
from attnlens.pipeline.entry import stage
from attnlens.render.tables import write_table
from attnlens.sharding import shard_of
from attnlens.tasks import task_of
from attnlens.topology.persistence import (
    BOTTLENECK_SCHEMA,
    DIAGRAMS_SCHEMA,
    DIAGRAMS_TYPES,
    MATRICES_SCHEMA,
    bottleneck_matrix,
    class_separation,
    diagrams_frame,
    example_topology,
    load_diagrams,
)
from attnlens.topology.pooling import pooled_from_bands, unit_frequencies, units

logger = logging.getLogger(__name__)


@stage("topology")
def run_topology(
    cfg: TopologyConfig,
    model_dir: StrPath,
    test_path: StrPath,
    shard: int,
    diagrams_path: StrPath,
    matrices_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``topology``: pooled attention → MI → distance → persistence, for the shard's test examples."""
    model, tokenizer = load_classifier(model_dir)
    model_device, arch = place(model, device), architecture(model)
    examples, _ = load_examples(test_path)
    encoded = encode_examples(tokenizer, examples, task_of(model.config))
    ids = [str(e) for e in examples["example_id"]]
    mine = [i for i, eid in enumerate(ids) if shard_of(eid, cfg.n_shards) == shard]
    frames, tensors, timing = [], {}, []
    for i in mine:
        t0 = time.perf_counter()
        input_ids = encoded.input_ids[i]
        special = structural_mask(tokenizer, input_ids)
        unit_of = units(display_tokens(tokenizer, input_ids), special, cfg.pooling, cfg.chunk_size)
        if unit_of.max() < 1:
            logger.warning("%s: fewer than 2 units, no topology", ids[i])
            continue
        bands = [
            band.cpu() for band in forward_bands(model, encoded.batch([i], model_device, arch))
        ]  # pooled on the CPU
        pooled = pooled_from_bands(bands[layer_slice(len(bands), cfg.layers)], unit_of)
        freqs = unit_frequencies(input_ids, unit_of)
        for est, (mi, d, diagrams, cap) in example_topology(pooled, freqs, cfg).items():
            frames.append(diagrams_frame(ids[i], est, diagrams, cap))
            tensors[f"{ids[i]}|{est}|mi"] = torch.from_numpy(mi)
            tensors[f"{ids[i]}|{est}|distance"] = torch.from_numpy(d)
        timing.append(
            {
                "example_id": ids[i],
                "tokens": len(input_ids),
                "units": int(unit_of.max()) + 1,
                "seconds": time.perf_counter() - t0,
            }
        )
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    prov = provenance(DIAGRAMS_SCHEMA, cfg.to_dict(), None, shard=shard, timing=timing, model=str(model_dir))
    save_parquet(frame, diagrams_path, prov, DIAGRAMS_TYPES)
    save_tensors(tensors, matrices_path, provenance(MATRICES_SCHEMA, cfg.to_dict(), None, shard=shard))
    total = sum(t["seconds"] for t in timing)
    logger.info("shard %d: %d examples in %.1f s", shard, len(timing), total)
    return {"n_examples": len(timing), "seconds": total}


@stage("topology")
def run_bottleneck_distances(
    cfg: TopologyConfig,
    diagram_paths: Sequence[StrPath],
    test_path: StrPath,
    matrix_path: StrPath,
    claim_path: StrPath,
    table_stem: StrPath,
) -> dict:
    """Rule ``bottleneck_distances``: all-pairs bottleneck distances per estimator and dimension, and the claim test."""
    diagrams = load_diagrams(diagram_paths)
    examples, _ = load_examples(test_path)
    label_of = dict(zip(examples["example_id"].astype(str), examples["label"].astype(int), strict=True))
    ids = sorted(diagrams["example_id"].unique(), key=lambda e: (label_of[e], e))
    rows, claims = [], []
    t0 = time.perf_counter()
    for est in cfg.estimators:
        got, claimed = _estimator_distances(cfg, diagrams[diagrams["estimator"] == est], est, ids, label_of)
        rows += got
        claims += claimed
    seconds = time.perf_counter() - t0
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    prov = provenance(BOTTLENECK_SCHEMA, cfg.to_dict(), cfg.seed, example_ids=ids, seconds=round(seconds, 2))
    save_parquet(frame, matrix_path, prov)
    notes = sorted({f"topology claim ({c['estimator']}, dim {c['dim']}): {c['note']}" for c in claims if c["note"]})
    claim_prov = provenance("topology_claim/v1", cfg.to_dict(), cfg.seed, notes=notes)
    save_json({"claims": claims, "example_ids": ids}, claim_path, claim_prov)
    _claim_table(cfg, claims, table_stem)
    logger.info("bottleneck matrices for %d examples in %.1f s", len(ids), seconds)
    return {"seconds": seconds}


def _estimator_distances(cfg: TopologyConfig, part: pd.DataFrame, est: str, ids: list, label_of: dict):
    """One estimator's all-pairs bottleneck distances per dimension (and their maximum), and each one's claim test."""
    per_dim = {}
    for dim in range(cfg.max_dimension + 1):
        sub = part[part["dim"] == dim]
        grouped = {e: g[["birth", "death"]].to_numpy() for e, g in sub.groupby("example_id")}
        per_dim[dim] = bottleneck_matrix([grouped.get(e, np.zeros((0, 2))) for e in ids])
    per_dim["max"] = np.max(np.stack([per_dim[d] for d in range(cfg.max_dimension + 1)]), 0)
    labels = np.array([label_of[e] for e in ids])
    bars = part.groupby(["dim", "example_id"]).size()
    iu = np.triu_indices(len(ids), 1)
    rows, claims = [], []
    for dim, mat in per_dim.items():
        rows.append(
            pd.DataFrame(
                {
                    "estimator": est,
                    "dim": str(dim),
                    "example_a": np.array(ids)[iu[0]],
                    "example_b": np.array(ids)[iu[1]],
                    "distance": mat[iu],
                }
            )
        )
        n_bars = bars.loc[dim].reindex(ids, fill_value=0).mean() if dim in bars.index.levels[0] else 0.0
        claims.append(
            {
                "estimator": est,
                "dim": str(dim),
                "mean_bars": None if dim == "max" else float(n_bars),
                **class_separation(mat, labels, cfg.n_permutations, cfg.seed),
            }
        )
    return rows, claims


def _claim_table(cfg: TopologyConfig, claims: list[dict], table_stem: StrPath) -> None:
    """The claim test's table: per estimator and dimension, the class gap and the nearest-neighbour accuracy."""
    table = pd.DataFrame(claims)[
        [
            "estimator",
            "dim",
            "mean_bars",
            "n_examples",
            "mean_same_class",
            "mean_different_class",
            "gap",
            "gap_p_value",
            "knn_accuracy",
            "knn_majority_rate",
            "knn_p_value",
            "note",
        ]
    ].astype({"mean_bars": object})
    # bars are counted per homology dimension; "max" is a distance, not a diagram
    table.loc[table["dim"] == "max", "mean_bars"] = "n/a: dim max combines H0 and H1"
    write_table(
        table,
        table_stem,
        "Does a small bottleneck distance between attention persistence diagrams mean the same class? "
        f"Gap = mean different-class − same-class distance; p-values from {cfg.n_permutations} label permutations; "
        "1-NN = leave-one-out nearest-neighbour accuracy (dim max = the larger of the H0 and H1 distances; "
        "note: why a cell is empty).",
    )
