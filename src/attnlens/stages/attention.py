"""Rules of ``workflow/rules/attention.smk``: head importance and sharded attention extraction."""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from attnlens.attention.band import binned_image
from attnlens.attention.summaries import (
    BANDS_SCHEMA,
    SUMMARY_SCHEMA,
    band_tensors,
    compute_example_summaries,
    position_counts,
    query_attention,
)
from attnlens.classifier.importance import (
    FIXED_DEVIATIONS,
    IMPORTANCE_SCHEMA,
    estimate_head_importance,
    head_labels,
    importance_matrices,
    zero_heads,
)
from attnlens.classifier.prediction import encode_examples
from attnlens.classifier.selection import load_selection
from attnlens.data.sources import load_examples
from attnlens.device import place
from attnlens.io import StrPath, pack_strings, provenance, save_tensors
from attnlens.models import architecture, forward_bands
from attnlens.models.checkpoints import load_classifier
from attnlens.pipeline.config import AttentionConfig, ImportanceConfig
from attnlens.pipeline.entry import stage
from attnlens.sharding import shard_of
from attnlens.tasks import task_of

log = logging.getLogger(__name__)


@stage("importance")
def run_estimate_head_importance(
    cfg: ImportanceConfig, model_dir: StrPath, examples_path: StrPath, out_path: StrPath, device: str = "auto"
) -> dict:
    """Rule ``estimate_head_importance``: legacy and fixed matrices in one safetensors file."""
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_classifier(model_dir)
    model_device, arch = place(model, device), architecture(model)
    examples, _ = load_examples(examples_path)
    if cfg.max_examples is not None and cfg.max_examples < len(examples):
        order = np.random.default_rng(cfg.seed).permutation(len(examples))[: cfg.max_examples]
        examples = examples.iloc[np.sort(order)]
    task = task_of(model.config)
    encoded = encode_examples(tokenizer, examples, task)
    labels = task.head_labels(examples["label"].to_numpy(), encoded)  # as the head's loss takes them

    def batches():
        for i in range(len(examples)):
            batch = encoded.batch([i], model_device, arch)
            batch |= {k: torch.from_numpy(v[i : i + 1].copy()).to(model_device) for k, v in labels.items()}
            yield batch

    t0 = time.perf_counter()
    matrices = importance_matrices(estimate_head_importance(model, batches(), cfg.estimator), cfg.normalisation)
    seconds = time.perf_counter() - t0
    zeros = {name: zero_heads(matrices[name]) for name in ("legacy", "fixed")}
    for name, heads in zeros.items():
        if heads:
            log.warning("%s importance is exactly 0 for %s: scaling removes them", name, head_labels(heads))
    n_layers, n_heads = matrices["fixed"].shape
    log.info(
        "head importance: %d %s examples, %d×%d heads, %.1f s", len(examples), cfg.split, n_layers, n_heads, seconds
    )
    prov = provenance(
        IMPORTANCE_SCHEMA,
        cfg.to_dict(),
        cfg.seed,
        split=cfg.split,
        example_ids=[str(e) for e in examples["example_id"]],
        model=str(model_dir),
        zero_heads=zeros,
        legacy="T3-vis: accumulated gradients, local projections only, global min-max (recipes §4)",
        fixed=f"per-example {cfg.estimator} Taylor terms, {' + '.join(arch.head_group_names)}, {cfg.normalisation}",
        head_groups={"local": list(arch.local_groups), "global": list(arch.global_groups)},
        architecture=arch.describe(model.config),
        deviations=list(FIXED_DEVIATIONS),
        seconds=round(seconds, 2),
    )
    save_tensors({k: v.to(torch.float64) for k, v in matrices.items()}, out_path, prov)
    return {"n_examples": len(examples), "zero_heads": zeros}


def _packed(name: str, strings: list[str]) -> dict[str, torch.Tensor]:
    data, offsets = pack_strings(strings)
    return {f"{name}_bytes": data, f"{name}_offsets": offsets}


@stage("attention")
def run_extract_attention(
    cfg: AttentionConfig,
    model_dir: StrPath,
    test_path: StrPath,
    selection_path: StrPath,
    shard: int,
    summary_path: StrPath,
    bands_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``extract_attention``: summaries of the shard's test examples and bands of its showcased ones.

    ``summary_path`` (safetensors) holds, concatenated over the shard's examples along the token axis,
    ``received`` ``(L, H, Σn)`` float32 and ``input_ids``, with per-example ``offsets``; top-k tables
    (``attended_idx/val``, ``attending_idx/val``, ``(L, H, Σn, k)``) for the examples of
    ``cfg.topk_for``; per query group of the task (:meth:`attnlens.tasks.Task.query_groups`: ``[CLS]``; a
    question's and its answer's tokens), ``query|<group>`` ``(L, H, Σn)``, the attention its tokens pay each key,
    and ``query|<group>|rows`` (its tokens per example, 0: none); and ``aggregate`` ``(L, H, bins, bins)``: the
    shard's part of the dataset mean
    attention per cell (each cell divided by the number of test examples in which both positions are
    real), binned over the longest test example. ``bands_path`` holds the local and global attention of
    every showcased example of the shard.
    """
    model, tokenizer = load_classifier(model_dir)
    model_device, arch = place(model, device), architecture(model)
    examples, _ = load_examples(test_path)
    showcased = {e["example_id"] for e in load_selection(selection_path)}
    task = task_of(model.config)
    encoded = encode_examples(tokenizer, examples, task)
    lengths = [len(ids) for ids in encoded.input_ids]
    count = position_counts(lengths)
    n_max = len(count)
    ids = [str(e) for e in examples["example_id"]]
    mine = [i for i, eid in enumerate(ids) if shard_of(eid, cfg.n_shards) == shard]
    acc = _ShardAttention(model.config.num_hidden_layers, model.config.num_attention_heads, cfg, count)
    bands_out: dict[str, torch.Tensor] = {}
    t0 = time.perf_counter()
    for i in mine:
        eid = ids[i]
        bands = forward_bands(model, encoded.batch([i], model_device, arch))
        groups = task.query_groups(examples["label"].iloc[i], encoded, i, arch.readout(lengths[i]))
        acc.add(eid, encoded.input_ids[i], bands, groups, cfg.topk_for == "all" or eid in showcased)
        if eid in showcased:
            bands_out.update(band_tensors(eid, acc.input_ids[-1], bands))
    seconds = time.perf_counter() - t0
    tensors = acc.tensors([ids[i] for i in mine])
    topk_ids, queries = acc.topk_ids, acc.queries
    common = {"shard": shard, "n_shards": cfg.n_shards, "model": str(model_dir)}
    prov = provenance(
        SUMMARY_SCHEMA,
        cfg.to_dict(),
        None,
        example_ids=[ids[i] for i in mine],
        topk_ids=topk_ids,
        query_groups=list(queries),
        n_test_examples=len(ids),
        n_max=n_max,
        seconds=round(seconds, 2),
        notes=arch.reading_notes(model.config, lengths) if shard == 0 else [],  # once, over every test example
        **common,
    )
    save_tensors(tensors, summary_path, prov)
    band_ids = [ids[i] for i in mine if ids[i] in showcased]
    save_tensors(bands_out, bands_path, provenance(BANDS_SCHEMA, cfg.to_dict(), None, example_ids=band_ids, **common))
    log.info(
        "shard %d/%d: %d examples (%d with top-k, %d showcased) in %.1f s",
        shard,
        cfg.n_shards,
        len(mine),
        len(topk_ids),
        len(band_ids),
        seconds,
    )
    return {"n_examples": len(mine), "seconds": seconds}


class _ShardAttention:
    """What ``extract_attention`` keeps of a shard's examples, example by example (:meth:`add`), and the tensors of
    its summary file (:meth:`tensors`)."""

    def __init__(self, n_layers: int, n_heads: int, cfg: AttentionConfig, count: torch.Tensor):
        self.n_layers, self.n_heads, self.cfg, self.count = n_layers, n_heads, cfg, count
        self.aggregate = torch.zeros(n_layers, n_heads, cfg.bins, cfg.bins, dtype=torch.float64)
        self.received: list[torch.Tensor] = []
        self.input_ids: list[torch.Tensor] = []
        self.offsets = [0]
        self.queries: dict[
            str, list[torch.Tensor]
        ] = {}  # per query group of the task: its attention, example by example
        self.query_rows: dict[str, list[int]] = {}
        self.topk_parts: dict[str, list[torch.Tensor]] = {}
        self.topk_ids: list[str] = []
        self.topk_offsets = [0]

    def add(self, eid: str, ids, bands, query_groups: dict, want_topk: bool) -> None:
        summary = compute_example_summaries(bands, self.cfg.top_k if want_topk else None)
        self.received.append(summary.pop("received"))
        for name, rows in query_groups.items():
            self.query_rows.setdefault(name, []).append(int(rows.sum()))
            self.queries.setdefault(name, []).append(query_attention(bands, torch.from_numpy(rows)))
        self.input_ids.append(torch.tensor(ids, dtype=torch.int32))
        self.offsets.append(self.offsets[-1] + len(ids))
        if want_topk:
            self.topk_ids.append(eid)
            self.topk_offsets.append(self.topk_offsets[-1] + len(ids))
            for key, value in summary.items():
                self.topk_parts.setdefault(key, []).append(value)
        for layer, band in enumerate(bands):
            self.aggregate[layer] += binned_image(band, self.cfg.bins, len(self.count), self.count).double().cpu()

    def tensors(self, example_ids: list[str]) -> dict[str, torch.Tensor]:
        """The summary file's tensors (:func:`run_extract_attention`'s docstring)."""
        L, H = self.n_layers, self.n_heads
        tensors = {
            "received": torch.cat(self.received, -1) if self.received else torch.zeros(L, H, 0),
            "input_ids": torch.cat(self.input_ids) if self.input_ids else torch.zeros(0, dtype=torch.int32),
            "offsets": torch.tensor(self.offsets, dtype=torch.int64),
            "topk_offsets": torch.tensor(self.topk_offsets, dtype=torch.int64),
            # the ids, readable without the metadata (example e: example_id_bytes[example_id_offsets[e]:[e + 1]])
            **_packed("example_id", example_ids),
            **_packed("topk_id", self.topk_ids),
            "aggregate": self.aggregate,
            "position_count": self.count,
        }
        for name, parts in self.queries.items():  # every example has every group (an empty one is zeros, 0 rows)
            tensors[f"query|{name}"] = torch.cat(parts, -1)
            tensors[f"query|{name}|rows"] = torch.tensor(self.query_rows[name], dtype=torch.int64)
        for key in ("attended_idx", "attended_val", "attending_idx", "attending_val"):
            parts = self.topk_parts.get(key)
            dtype = torch.int32 if key.endswith("idx") else torch.float32
            tensors[key] = torch.cat(parts, 2) if parts else torch.zeros(L, H, 0, self.cfg.top_k, dtype=dtype)
        return tensors
