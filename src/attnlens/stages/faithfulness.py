"""Rules of ``workflow/rules/faithfulness.smk``: deletion and insertion curves and plausibility (the figure and
tables: :mod:`attnlens.stages.report`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlens.attention.band import attention_scores
from attnlens.attention.summaries import load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations, scores_by_example
from attnlens.attribution.methods import CONTROL, REFERENCE, method_names, ranking_source
from attnlens.attribution.ranking_faithfulness import (
    FAITHFULNESS_SCHEMA,
    PLAUSIBILITY_SCHEMA,
    example_evidence,
    plausibility,
    random_ranking,
    ranking,
)
from attnlens.attribution.removal import copies_probe, evaluate_example
from attnlens.classifier.prediction import encode_examples
from attnlens.data.sources import load_examples
from attnlens.data.tokens import structural_mask
from attnlens.device import batch_size, place
from attnlens.io import (
    StrPath,
    provenance,
    save_parquet,
)
from attnlens.models.checkpoints import load_classifier
from attnlens.pipeline.config import FaithfulnessConfig
from attnlens.pipeline.entry import stage
from attnlens.tasks import task_of

logger = logging.getLogger(__name__)


@stage("faithfulness")
def run_evaluate_faithfulness(
    cfg: FaithfulnessConfig,
    model_dir: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    attribution_paths: Sequence[StrPath],
    summary_paths: Sequence[StrPath],
    curves_path: StrPath,
    plausibility_path: StrPath,
    explanation_paths: Sequence[StrPath] = (),
    device: str = "auto",
) -> dict:
    """Rule ``evaluate_faithfulness``: curves of every ranking for every test example, and plausibility.

    Rankings are IG, received attention of a layer configuration (from the attention summaries),
    the explanation methods of ``explain`` (from its shards) and the seeded random control.
    """
    model, tokenizer = load_classifier(model_dir)
    model_device = place(model, device)
    examples, _ = load_examples(test_path)
    rationales = pd.read_parquet(rationales_path)
    task = task_of(model.config)
    encoded = encode_examples(tokenizer, examples, task)  # each token's characters, for the planted evidence
    row_of = {str(e): i for i, e in enumerate(examples["example_id"])}
    attributions = load_attributions(attribution_paths)
    summaries = load_summaries(summary_paths).examples if summary_paths else {}
    explained = scores_by_example(load_explanations(explanation_paths), method_names()) if explanation_paths else {}
    curves, plaus = [], []
    longest = max(attributions["input_ids"], key=len, default=None)
    copies = (
        (1, {"how": "no example"})
        if longest is None
        else batch_size(
            cfg.copies_per_pass,
            model_device,
            copies_probe(model, [int(i) for i in longest]),
            2 * len(cfg.rankings) * (len(cfg.fractions) + 2),
            "the removal curves' batch",
        )
    )
    t0 = time.perf_counter()
    for row in attributions.itertuples(index=False):
        eid = row.example_id
        ids = [int(i) for i in row.input_ids]
        special = structural_mask(tokenizer, ids)
        eligible = ~special
        scores = _ranking_scores(cfg, row, ids, summaries, explained)
        orders = {
            name: random_ranking(eligible, cfg.seed, eid) if name == CONTROL else ranking(scores[name], eligible)
            for name in cfg.rankings
        }
        frame = evaluate_example(model, ids, special, orders, int(row.target), cfg.fractions, copies[0], tokenizer)
        frame.insert(0, "example_id", eid)
        curves.append(frame)
        plaus += _plausibility(
            cfg, task, rationales, encoded, row_of[eid], eid, int(row.target), ids, scores, orders, eligible
        )
    seconds = time.perf_counter() - t0
    curves_frame = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()
    prov = provenance(
        FAITHFULNESS_SCHEMA,
        cfg.to_dict(),
        cfg.seed,
        seconds=round(seconds, 2),
        model=str(model_dir),
        task=task.name,
        batch=copies[1],
    )  # what the curves' F is (attnlens.tasks)
    save_parquet(curves_frame, curves_path, prov)
    plaus_frame = pd.DataFrame(
        plaus, columns=["example_id", "ranking", "n_evidence", "auprc", "precision", "recall", "f1"]
    )
    save_parquet(plaus_frame, plausibility_path, provenance(PLAUSIBILITY_SCHEMA, cfg.to_dict(), cfg.seed))
    logger.info("%d examples x %d rankings in %.1f s", len(attributions), len(cfg.rankings), seconds)
    return {"n_examples": len(attributions), "seconds": seconds}


def _ranking_scores(cfg: FaithfulnessConfig, row, ids: list[int], summaries: dict, explained: dict) -> dict:
    """Every ranking's scores of one example: IG's, received attention's (the attention summaries), the explanation
    methods' (the explain shards); the random control has none."""
    eid = row.example_id
    scores = {REFERENCE: np.asarray(row.scores, dtype=np.float64)}
    for name in cfg.rankings:
        source = ranking_source(name)
        if source == "attention":
            ex = summaries[eid]
            if ex.input_ids.tolist() != ids:
                raise ValueError(f"{eid}: attention and attribution saw different token ids")
            scores[name] = attention_scores(ex.received, name.removeprefix("attention_"))
        elif source == "explain":
            if name not in explained.get(eid, {}):
                raise ValueError(f"{eid}: no {name!r} explanation in the explain shards")
            scores[name] = explained[eid][name]
            if len(scores[name]) != len(ids):
                raise ValueError(f"{eid}: the {name} explanation has {len(scores[name])} tokens, IG {len(ids)}")
    return scores


def _plausibility(
    cfg: FaithfulnessConfig, task, rationales, encoded, index: int, eid: str, target: int, ids, scores, orders, eligible
) -> list[dict]:
    """Every ranking's plausibility against the planted evidence of one example's target (none without evidence)."""
    ev = task.evidence(rationales, target)
    ev = ev[ev["example_id"] == eid] if len(ev) else ev
    if not len(ev):
        return []
    spans = list(zip(ev["char_start"], ev["char_end"], strict=True))
    labels = example_evidence(encoded, index, ids, spans, eid)
    if CONTROL in orders:  # scores that reproduce the random order
        scores[CONTROL] = np.zeros(len(ids))
        scores[CONTROL][orders[CONTROL]] = np.arange(len(orders[CONTROL]), 0, -1)
    return [
        {
            "example_id": eid,
            "ranking": name,
            "n_evidence": int(labels[eligible].sum()),
            **plausibility(scores[name], labels, eligible, cfg.plausibility_k),
        }
        for name in cfg.rankings
    ]
