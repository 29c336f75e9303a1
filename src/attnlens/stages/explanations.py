"""Rules of ``workflow/rules/explanations.smk``: explanation shards and the randomisation sanity check
(the leaderboard: :mod:`attnlens.stages.report`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlens.attribution.artifacts import (
    EXPLANATION_TYPES,
    EXPLANATIONS_SCHEMA,
    load_attributions,
)
from attnlens.attribution.engine import documents_batch, explain_together, explanation_rows
from attnlens.attribution.explanations import Example, occlusion_batch
from attnlens.attribution.ig import freeze
from attnlens.attribution.sanity_check import SANITY_COLUMNS, SANITY_SCHEMA, layers_of, levels, sanity_rows
from attnlens.data.tokens import structural_mask
from attnlens.device import place
from attnlens.io import StrPath, provenance, save_parquet
from attnlens.models import architecture
from attnlens.models.checkpoints import load_classifier
from attnlens.models.randomisation import randomise_top
from attnlens.pipeline.config import ExplanationsConfig, FindingsConfig
from attnlens.pipeline.entry import stage
from attnlens.sharding import shard_of

logger = logging.getLogger(__name__)


@stage("explanations")
def run_explain(
    cfg: ExplanationsConfig,
    model_dir: StrPath,
    attribution_paths: Sequence[StrPath],
    shard: int,
    out_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``explain``: every method of ``explanations.methods`` for the test examples of one shard.

    Each example is explained for IG's target on IG's token ids (read from the ``attribute`` shards), so every
    method answers the same question as the reference it is compared with: the headline target, or, with
    ``explanations.targets: every``, each target IG explains.
    """
    model, tokenizer = load_classifier(model_dir)
    model_device = place(freeze(model), device)
    attributions = load_attributions(attribution_paths, every_target=cfg.targets == "every")
    mine = attributions[[shard_of(str(e), cfg.n_shards) == shard for e in attributions["example_id"]]]
    occlusion = occlusion_batch(
        cfg.copies_per_pass, cfg.methods, model, model_device, [list(ids) for ids in mine["input_ids"]]
    )
    examples = [
        Example.of_document(
            model, tokenizer, [int(i) for i in row.input_ids], int(row.target), cfg, occlusion[0], model_device
        )
        for row in mine.itertuples(index=False)
    ]
    documents = documents_batch(cfg.documents_per_pass, cfg.methods, examples)
    t0 = time.perf_counter()
    results = explain_together(examples, cfg.methods, documents[0])
    rows = []
    for row, x, res in zip(mine.itertuples(index=False), examples, results, strict=True):
        ids = [int(i) for i in row.input_ids]
        rows.extend(explanation_rows(row.example_id, ids, x.target, res, cfg.methods, int(row.target_rank)))
        logger.info(
            "%s: %d tokens, forward %.3f s; %s",
            row.example_id,
            len(ids),
            res.forward_seconds,
            ", ".join(f"{m} {res.seconds[m]:.3f} s" for m in cfg.methods),
        )
    seconds = time.perf_counter() - t0
    frame = pd.DataFrame(rows, columns=list(EXPLANATION_TYPES.names))
    prov = provenance(
        EXPLANATIONS_SCHEMA,
        cfg.to_dict(),
        None,
        shard=shard,
        n_shards=cfg.n_shards,
        model=str(model_dir),
        device=str(model_device),
        seconds=round(seconds, 2),
        occlusion_batch=occlusion[1],
        documents_batch=documents[1],
    )
    save_parquet(frame, out_path, prov, EXPLANATION_TYPES)
    n_examples = frame["example_id"].nunique() if len(frame) else 0
    logger.info(
        "shard %d/%d: %d examples x %d methods in %.1f s", shard, cfg.n_shards, n_examples, len(cfg.methods), seconds
    )
    return {"n_examples": n_examples, "seconds": seconds}


@stage("explanations", "findings")
def run_sanity_check(
    cfg: ExplanationsConfig,
    findings: FindingsConfig,
    model_dir: StrPath,
    attribution_paths: Sequence[StrPath],
    out_path: StrPath,
    device: str = "auto",
) -> pd.DataFrame:
    """Rule ``sanity_check``: the first ``findings.sanity_examples`` test examples (by id) explained by every method
    of ``explanations.methods`` on the trained classifier and on each randomised copy of the cascade
    (:mod:`attnlens.attribution.sanity_check`), and each method's Spearman ρ between the two."""
    model, tokenizer = load_classifier(model_dir)
    model_device = place(freeze(model), device)
    attributions = load_attributions(attribution_paths).sort_values("example_id", kind="stable")
    chosen = attributions.head(findings.sanity_examples)
    cascade = levels(len(architecture(model).layers(model)))
    chosen_ids = [
        (str(row.example_id), [int(i) for i in row.input_ids], int(row.target))
        for row in chosen.itertuples(index=False)
    ]
    occlusion = occlusion_batch(
        cfg.copies_per_pass, cfg.methods, model, model_device, [ids for _, ids, _ in chosen_ids]
    )

    def examples_of(net) -> list[Example]:
        return [
            Example.of_document(net, tokenizer, ids, t, cfg, occlusion[0], model_device) for _, ids, t in chosen_ids
        ]

    def explain_all(examples: list[Example]) -> dict[str, dict[str, np.ndarray]]:
        results = explain_together(examples, cfg.methods, documents[0])
        return {example_id: res.scores for (example_id, _, _), res in zip(chosen_ids, results, strict=True)}

    on_trained = examples_of(model)
    documents = documents_batch(cfg.documents_per_pass, cfg.methods, on_trained)
    t0 = time.perf_counter()
    trained = explain_all(on_trained)
    by_level = {}
    for level in cascade:
        fresh, _ = load_classifier(model_dir)
        freeze(randomise_top(fresh, layers_of(level), findings.seed))
        place(fresh, device)
        by_level[level] = explain_all(examples_of(fresh))
        del fresh
        logger.info("%s: %d examples explained again", level, len(chosen_ids))
    rows = []
    for example_id, ids, _target in chosen_ids:
        rows += sanity_rows(
            example_id,
            trained[example_id],
            {lv: by_level[lv][example_id] for lv in cascade},
            ~structural_mask(tokenizer, ids),
            cfg.methods,
        )
    frame = pd.DataFrame(rows, columns=SANITY_COLUMNS)
    seconds = time.perf_counter() - t0
    prov = provenance(
        SANITY_SCHEMA,
        {**cfg.to_dict(), **findings.to_dict()},
        findings.seed,
        levels=cascade,
        model=str(model_dir),
        seconds=round(seconds, 2),
    )
    save_parquet(frame, out_path, prov)
    logger.info(
        "%d examples x %d methods x %d levels in %.1f s", len(chosen_ids), len(cfg.methods), len(cascade), seconds
    )
    return frame
