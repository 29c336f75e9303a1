"""Rule ``answer_sanity``: the model-randomisation sanity check of the answer methods on a generated answer's sources
(:mod:`attnlens.attribution.sanity_check`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlens.attribution.answer_example import AnswerExample
from attnlens.attribution.artifacts import (
    ANSWER_SCORE_COLUMNS,
    ANSWER_SCORES_SCHEMA,
    load_answer_shards,
    load_head_weights,
)
from attnlens.attribution.datamodels import answer_masks, answer_orders, leave_one_out_masks
from attnlens.attribution.engine import explain
from attnlens.attribution.sanity_check import SANITY_COLUMNS, SANITY_SCHEMA, layers_of, levels, sanity_rows
from attnlens.device import place
from attnlens.generation.answer_artifacts import RESPONSE_COLUMNS, RESPONSES_SCHEMA
from attnlens.generation.responses import ablate, ablated, hierarchical_search, hierarchy_masks, split_scores
from attnlens.io import StrPath, load_parquet, provenance, save_parquet
from attnlens.models import architecture
from attnlens.models.loading import load_causal_lm
from attnlens.models.randomisation import head_modules, randomise_top
from attnlens.pipeline.config import FindingsConfig, GenerationConfig
from attnlens.pipeline.entry import stage

log = logging.getLogger(__name__)


def _randomised_example(model, tokenizer, row, k: int, cfg: GenerationConfig, device, head_weights) -> AnswerExample:
    """Response row ``k`` as the scorers see it on ``model``: its full score and the surrogate's, leave-one-out's and
    permutation Shapley's ablations computed again on this model (the cached ones are the trained model's), with
    the same masks, and the hierarchical search run again on it (where asked for)."""
    n_sources = len(row.source_start)
    train, _ = answer_masks(cfg.seed, k, n_sources, cfg.n_ablations, cfg.n_heldout, cfg.keep)
    loo = leave_one_out_masks(n_sources)
    chains = answer_orders(cfg.seed, k, n_sources, cfg.shapley_orders)
    everything = np.ones((1, n_sources), dtype=bool)
    t0 = time.perf_counter()
    lp, jsd = ablate(model, tokenizer, row, np.vstack([everything, train, loo, chains]), cfg, end=True, divergence=True)
    seconds = time.perf_counter() - t0
    at = np.cumsum([1, len(train), len(loo)])  # where each kind's rows start after the whole context's
    full = split_scores(row, lp[:1], cfg, fit=False)[0][0]
    hierarchical = None
    if "hierarchical" in cfg.methods:  # searched again: which groups matter is this model's to say
        t0 = time.perf_counter()
        found = hierarchical_search(model, tokenizer, row, hierarchy_masks(row, cfg), cfg, full)
        hierarchical = ablated(row, *found, time.perf_counter() - t0, cfg, fit=False)
    return AnswerExample.build(
        model,
        row.input_ids,
        row.answer_length,
        row.owner,
        n_sources,
        full,
        cfg,
        tokenizer.pad_token_id,
        device,
        leave_one_out=ablated(row, loo, lp[at[1] : at[2]], seconds, cfg, jsd[at[1] : at[2]], fit=False),
        random=ablated(row, train, lp[at[0] : at[1]], seconds, cfg),
        permutation=ablated(row, chains, lp[at[2] :], seconds, cfg, fit=False) if len(chains) else None,
        hierarchical=hierarchical,
        head_weights=head_weights,
        index=k,
    )


@stage("generation", "findings")
def run_answer_sanity(
    cfg: GenerationConfig,
    findings: FindingsConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    scores_paths: Sequence[StrPath],
    out_path: StrPath,
    learned_path: StrPath | None = None,
) -> pd.DataFrame:
    """Rule ``answer_sanity``: the first ``findings.sanity_examples`` explained answers (by id), every method of
    ``generation.methods`` on each randomised copy of the generator (the cascade from its head down to every layer,
    ``findings.seed``), and each method's Spearman ρ with the trained model's scores (``explain_answers``' shards)
    over the sources that have tokens, beside the randomised scores' ρ with the sources' order."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    scored = load_answer_shards(scores_paths, ANSWER_SCORES_SCHEMA, ANSWER_SCORE_COLUMNS, responses["example_id"])
    head_weights = load_head_weights(learned_path) if learned_path else None
    positions = {eid: k for k, eid in enumerate(responses["example_id"])}  # k: the row's masks (answer_masks)
    chosen = sorted(positions)[: findings.sanity_examples]
    cascade = levels(len(architecture(model).layers(model)), head=bool(head_modules(model)))
    del model
    trained = {
        eid: {m.method: np.asarray(m.scores, dtype=np.float64) for m in rows.itertuples(index=False)}
        for eid, rows in scored[scored["example_id"].isin(chosen)].groupby("example_id", sort=False)
    }
    by_id = responses.set_index("example_id", drop=False)
    t0 = time.perf_counter()
    by_level: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for level in cascade:
        fresh, _ = load_causal_lm(str(model_dir), "model_dir")
        randomise_top(fresh, layers_of(level), findings.seed)
        dev = place(fresh, device)
        for p in fresh.parameters():
            p.requires_grad_(False)
        by_level[level] = {}
        for eid in chosen:
            x = _randomised_example(fresh, tokenizer, by_id.loc[eid], positions[eid], cfg, dev, head_weights)
            by_level[level][eid] = explain(x, cfg.methods).scores
        del fresh
        log.info("%s: %d answers explained again", level, len(chosen))
    rows = []
    for eid in chosen:
        owner = np.asarray(by_id.loc[eid, "owner"], dtype=np.int64)
        n_sources = len(by_id.loc[eid, "source_start"])
        has_tokens = np.bincount(owner[owner >= 0], minlength=n_sources)[:n_sources] > 0
        rows += sanity_rows(eid, trained[eid], {lv: by_level[lv][eid] for lv in cascade}, has_tokens, cfg.methods)
    frame = pd.DataFrame(rows, columns=SANITY_COLUMNS)
    keys = {"generation": cfg.to_dict(), "findings": findings.to_dict()}
    prov = provenance(
        SANITY_SCHEMA,
        keys,
        findings.seed,
        levels=cascade,
        model=str(model_dir),
        seconds=round(time.perf_counter() - t0, 2),
    )
    save_parquet(frame, out_path, prov)
    log.info("%d answers x %d methods x %d levels", len(chosen), len(cfg.methods), len(cascade))
    return frame
