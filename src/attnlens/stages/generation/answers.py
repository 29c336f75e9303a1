"""Rules ``ablate_contexts``, ``explain_answers`` and ``judge_answers``: every ablation's answer scores (computed once),
every answer method's source scores, and their judgement."""

from __future__ import annotations

import logging
from functools import partial

import numpy as np
import pandas as pd

from attnlens.attribution.answer_example import Ablated, AnswerExample
from attnlens.attribution.artifacts import (
    ABLATION_COLUMNS,
    ABLATIONS_SCHEMA,
    ANSWER_SCORE_COLUMNS,
    ANSWER_SCORES_SCHEMA,
    JUDGED_COLUMNS,
    JUDGED_SCHEMA,
    load_head_weights,
)
from attnlens.attribution.datamodels import answer_masks, leave_one_out_masks, score_of
from attnlens.attribution.engine import explain
from attnlens.attribution.leaderboard import EXAMPLE_COLUMNS
from attnlens.attribution.methods import ANSWER_ABLATIONS, get_method
from attnlens.device import place
from attnlens.generation.answer_artifacts import RESPONSE_COLUMNS, RESPONSES_SCHEMA
from attnlens.generation.answer_leaderboard import (
    EXACT,
    exact_scores,
    exact_table,
    judge_answer,
    judge_exact,
    looked_up,
    removal_masks,
)
from attnlens.generation.responses import ablate, ablated, method_masks, timed_ablations
from attnlens.io import StrPath, load_parquet, provenance, save_parquet
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig
from attnlens.pipeline.entry import stage
from attnlens.pipeline.resume import Resumable
from attnlens.sharding import shard_positions

log = logging.getLogger(__name__)


# --- ablate_contexts ---------------------------------------------------------------------------------------------


def _shard(responses: pd.DataFrame, cfg: GenerationConfig, shard: int) -> list[tuple[int, object]]:
    """The answers of ``shard`` (``generation.n_shards``, by a stable hash of the example id), each with its place
    ``k`` among all the responses: what its masks are drawn from, so a shard draws what one job draws."""
    rows = list(responses.itertuples(index=False))
    return [(k, rows[k]) for k in shard_positions(responses["example_id"], cfg.n_shards, shard)]


@stage("generation")
def run_ablate_contexts(
    cfg: GenerationConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    shard: int,
    ablations_path: StrPath,
) -> pd.DataFrame:
    """Rule ``ablate_contexts``: every answer of one shard, its token log-probabilities on its context with sources
    removed (``generation.removal``) — the surrogate's random ablations, the held-out ones, leave-one-out (with each
    answer token's Jensen–Shannon divergence from the whole context, ARC-JSD's), permutation Shapley's chains
    (``generation.shapley_orders``) and, for an answer of at most ``generation.exact_sources`` sources, every one of
    its ``2ⁿ`` ablations (exact truth) — and the wall seconds of each kind's forwards. Each finished answer is kept,
    so a killed job resumes (:class:`~attnlens.pipeline.resume.Resumable`)."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    units = Resumable.beside(ablations_path, cfg.to_dict(), [model_dir, responses_path])
    rows = []
    for k, row in _shard(responses, cfg, shard):
        rows += units.rows((row.example_id,), partial(_ablations, model, tokenizer, row, k, cfg))
    frame = pd.DataFrame(rows, columns=ABLATION_COLUMNS.names)
    prov = provenance(ABLATIONS_SCHEMA, {"generation": cfg.to_dict()}, cfg.seed, shard=shard, resumed=units.resumed)
    save_parquet(frame, ablations_path, prov, ABLATION_COLUMNS)
    units.finish()
    log.info("shard %d: %d answers (%d resumed), %d ablations", shard, frame["example_id"].nunique(), units.resumed,
             sum(len(m) for m in frame["masks"]))  # fmt: skip
    return frame


def _ablations(model, tokenizer, row, k: int, cfg: GenerationConfig) -> list[dict]:
    """One answer's rows of ``ablate_contexts``: a row per kind of ablation."""
    n_sources = len(row.source_start)
    train, heldout = answer_masks(cfg.seed, k, n_sources, cfg.n_ablations, cfg.n_heldout, cfg.keep)
    kinds = {"random": train, "heldout": heldout, "leave_one_out": leave_one_out_masks(n_sources)}
    read = {get_method(m).ablations for m in cfg.methods}
    kinds |= method_masks(row, cfg, k, read & {"permutation", "hierarchical"})
    every = n_sources <= cfg.exact_sources
    return [
        {
            "example_id": row.example_id,
            "kind": kind,
            "masks": masks.tolist(),
            "token_log_probs": lp.tolist(),
            "token_jsd": [] if jsd is None else jsd.tolist(),
            "seconds": seconds,
        }
        for kind, (masks, lp, seconds, jsd) in timed_ablations(model, tokenizer, row, kinds, cfg, every).items()
    ]


def _ablated(ablations: pd.DataFrame, response, kind: str, cfg: GenerationConfig, fit: bool = False) -> Ablated | None:
    """A response's ablations of ``kind`` (masks, ``F`` on each, seconds; with ``fit``, the surrogate's target); None
    where it has none of that kind (kind ``every`` only for answers of at most ``generation.exact_sources``
    sources)."""
    mine = ablations[(ablations["example_id"] == response.example_id) & (ablations["kind"] == kind)]
    if mine.empty:
        return None
    row = mine.iloc[0]
    masks = np.array([list(m) for m in row["masks"]], dtype=bool).reshape(len(row["masks"]), -1)
    lp = np.array([list(t) for t in row["token_log_probs"]], dtype=np.float64).reshape(len(masks), -1)
    jsd = [list(t) for t in row["token_jsd"]] or None
    return ablated(response, masks, lp, row["seconds"], cfg, jsd, fit)


# --- explain_answers ---------------------------------------------------------------------------------------------


@stage("generation")
def run_explain_answers(
    cfg: GenerationConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    ablations_path: StrPath,
    shard: int,
    scores_path: StrPath,
    learned_path: StrPath | None = None,
) -> pd.DataFrame:
    """Rule ``explain_answers``: every method of ``generation.methods`` scores the sources of every answer of one
    shard (its ablations: the same shard of ``ablate_contexts``); what each cost (seconds, forwards, backwards, peak
    memory) and one plain forward's seconds beside it. ``learned_path``: learned attention's head weights
    (``fit_learned_attention``), where the method is asked for. Each finished answer is kept, so a killed job
    resumes."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    dev = place(model, device)
    for p in model.parameters():
        p.requires_grad_(False)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    ablations, _ = load_parquet(ablations_path, ABLATIONS_SCHEMA, ABLATION_COLUMNS)
    head_weights = load_head_weights(learned_path) if learned_path else None
    units = Resumable.beside(scores_path, cfg.to_dict(), [model_dir, responses_path, ablations_path, learned_path])
    rows = []
    for k, row in _shard(responses, cfg, shard):
        x = partial(_example, model, row, k, ablations, cfg, tokenizer.pad_token_id, dev, head_weights)
        rows += units.rows((row.example_id,), partial(_scores, x, row.example_id, cfg.methods))
    frame = pd.DataFrame(rows, columns=ANSWER_SCORE_COLUMNS.names)
    prov = provenance(ANSWER_SCORES_SCHEMA, {"generation": cfg.to_dict()}, cfg.seed, shard=shard, resumed=units.resumed)
    save_parquet(frame, scores_path, prov, ANSWER_SCORE_COLUMNS)
    units.finish()
    log.info("shard %d: %d answers (%d resumed), methods %s", shard, frame["example_id"].nunique(), units.resumed,
             list(cfg.methods))  # fmt: skip
    return frame


def _example(model, row, k: int, ablations: pd.DataFrame, cfg: GenerationConfig, pad_id: int, device, head_weights):
    """Response row ``k`` as the methods read it, with its cached ablations (parsed only for an answer that runs)."""
    cached = {kind: _ablated(ablations, row, kind, cfg, fit=kind == "random") for kind in ANSWER_ABLATIONS}
    return AnswerExample.of_response(model, row, cfg, pad_id, device, head_weights=head_weights, index=k, **cached)


def _scores(example, example_id: str, methods) -> list[dict]:
    """One answer's rows of ``explain_answers``: a row per method (``example``: builds the answer's
    :class:`AnswerExample`)."""
    res = explain(example(), methods)
    return [
        {
            "example_id": example_id,
            "method": method,
            "scores": res.scores[method].tolist(),
            "seconds": res.seconds[method],
            "forward_seconds": res.forward_seconds,
            "n_forwards": res.n_forwards[method],
            "n_backwards": res.n_backwards[method],
            "peak_bytes": res.peak_bytes[method],
            "explained": res.explained.get(method, np.nan),
            "delta": res.delta.get(method, np.nan),
        }
        for method in methods
    ]


# --- judge_answers -----------------------------------------------------------------------------------------------


@stage("generation")
def run_judge_answers(
    cfg: GenerationConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    ablations_path: StrPath,
    scores_path: StrPath,
    shard: int,
    judged_path: StrPath,
) -> pd.DataFrame:
    """Rule ``judge_answers``: per answer of one shard and method, the top-``k`` drops (the removals run once per
    distinct mask, or read from the answer's every ablation where ``ablate_contexts`` scored them all), the linear
    datamodeling score on the held-out ablations, precision and recall at ``k`` against the planted sources, the
    cost; and where every ablation was scored, the exact-truth judgement (:func:`judge_exact`) and the exact values'
    own rows. Each finished answer is kept, so a killed job resumes."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    ablations, _ = load_parquet(ablations_path, ABLATIONS_SCHEMA, ABLATION_COLUMNS)
    scored, _ = load_parquet(scores_path, ANSWER_SCORES_SCHEMA, ANSWER_SCORE_COLUMNS)
    units = Resumable.beside(judged_path, cfg.to_dict(), [model_dir, responses_path, ablations_path, scores_path])
    rows: list[dict] = []
    for _, row in _shard(responses, cfg, shard):
        mine = scored[scored["example_id"] == row.example_id]
        rows += units.rows((row.example_id,), partial(_judgement, model, tokenizer, row, ablations, mine, cfg))
    frame = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS))
    prov = provenance(JUDGED_SCHEMA, {"generation": cfg.to_dict()}, cfg.seed, shard=shard, resumed=units.resumed)
    save_parquet(frame, judged_path, prov, JUDGED_COLUMNS)
    units.finish()
    log.info("shard %d: %d answers judged (%d resumed)", shard, frame["example_id"].nunique(), units.resumed)
    return frame


def _judgement(model, tokenizer, row, ablations: pd.DataFrame, mine: pd.DataFrame, cfg: GenerationConfig) -> list:
    """One answer's rows of ``judge_answers`` (``mine``: its methods' scores)."""
    ks = tuple(cfg.top_k)
    scores = {m.method: np.asarray(m.scores, dtype=np.float64) for m in mine.itertuples(index=False)}
    every = _ablated(ablations, row, "every", cfg)
    table = None if every is None else exact_table(every.masks, every.scores)
    if table is not None:
        scores |= exact_scores(table)
    masks, where = removal_masks(scores, ks)
    if table is None:
        removed = score_of(ablate(model, tokenizer, row, masks, cfg), cfg.score)
        full = float(getattr(row, cfg.score))
    else:  # every removal is an ablation already scored: read, no forward, and F(all) from the same table
        removed, full = looked_up(table, masks), float(table[-1])
    heldout = _ablated(ablations, row, "heldout", cfg)
    planted = np.asarray(row.planted, dtype=bool)
    rows = judge_answer(row.example_id, scores, ks, full, removed, where, heldout.masks, heldout.scores, planted)
    if table is not None:
        rows += judge_exact(row.example_id, scores, ks, table, removed, where, scores["exact_shapley"])
        forward = float(mine["forward_seconds"].iloc[0]) if len(mine) else np.nan
        for name in EXACT:
            rows += [
                (row.example_id, name, "seconds", every.seconds, np.nan),
                (row.example_id, name, "cost_ratio", every.seconds / forward, np.nan),
                (row.example_id, name, "forwards", float(len(table)), np.nan),
                (row.example_id, name, "backwards", 0.0, np.nan),
            ]
    for m in mine.itertuples(index=False):
        rows += [
            (row.example_id, m.method, "seconds", m.seconds, np.nan),
            (row.example_id, m.method, "cost_ratio", m.seconds / m.forward_seconds, np.nan),
            (row.example_id, m.method, "forwards", float(m.n_forwards), np.nan),
            (row.example_id, m.method, "backwards", float(m.n_backwards), np.nan),
            (row.example_id, m.method, "peak_mib", m.peak_bytes / 2**20, np.nan),
        ]
    return [dict(zip(EXAMPLE_COLUMNS, r, strict=True)) for r in rows]
