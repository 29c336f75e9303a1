"""Rule ``fit_learned_attention``: learned attention's head weights (AT2), fitted on ablations of training examples'
answers — never the explained ones — and the fit's report."""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from attnlens.attribution.artifacts import LEARNED_SCHEMA
from attnlens.attribution.datamodels import answer_masks
from attnlens.attribution.head_weights import FitExample, fit_head_weights, source_features
from attnlens.attribution.source_scores import answer_head_attention
from attnlens.data.sources import load_examples
from attnlens.device import place
from attnlens.generation.answer_artifacts import response_sources
from attnlens.generation.responses import ablate, fit_target, responses
from attnlens.io import StrPath, provenance, save_json
from attnlens.models import architecture
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig
from attnlens.pipeline.entry import stage

log = logging.getLogger(__name__)


@stage("generation")
def run_fit_learned_attention(
    cfg: GenerationConfig, target: str, device: str, model_dir: StrPath, train_path: StrPath, weights_path: StrPath
) -> dict:
    """Rule ``fit_learned_attention``: the answers of the first ``generation.learned.n_examples`` training examples
    (as ``generate_answers`` makes the explained ones), ``learned.n_ablations`` random ablations of each, every
    source's attention per layer and head, and AT2's fit of one weight per head
    (:func:`attnlens.attribution.head_weights.fit_head_weights`); the weights and the fit's correlations, fitted and
    held out, beside those of every head weighted alike."""
    learned = cfg.learned
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    dev = place(model, device)
    train_df, _ = load_examples(train_path)
    frame, notes = responses(model, tokenizer, train_df.head(learned.n_examples), cfg, target, None, str(train_path))
    t0 = time.perf_counter()
    examples = []
    for k, row in enumerate(frame.itertuples(index=False)):
        sources = response_sources(row)
        masks, _ = answer_masks(learned.seed, k, len(sources), learned.n_ablations, 0, cfg.keep)
        scores, _ = fit_target(row, ablate(model, tokenizer, row, masks, cfg, tree=True, end=True), cfg)
        ids = torch.as_tensor(np.asarray(row.input_ids, dtype=np.int64))[None].to(dev)
        rows = answer_head_attention(model, ids, int(row.answer_length))
        features = source_features(rows, np.asarray(row.owner), len(sources))
        examples.append(FitExample(features, masks, scores))
    ablation_seconds = time.perf_counter() - t0
    layers = len(architecture(model).layers(model))
    heads = int(model.config.num_attention_heads)
    t0 = time.perf_counter()
    fit = fit_head_weights(examples, layers, heads, learned.steps, learned.learning_rate, learned.heldout)
    record = {
        "layers": layers,
        "heads": heads,
        "weights": fit.weights.tolist(),
        "n_examples": len(examples),
        "n_fit": fit.n_fit,
        "n_heldout": len(examples) - fit.n_fit,
        "n_ablations": learned.n_ablations,
        "score": cfg.fit_score,
        "end_token": cfg.fit_end_token,
        "fit_correlation": fit.fit_correlation,
        "heldout_correlation": fit.heldout_correlation,
        "uniform_fit_correlation": fit.uniform_fit_correlation,
        "uniform_heldout_correlation": fit.uniform_heldout_correlation,
        "first_loss": fit.losses[0],
        "last_loss": fit.losses[-1],
        "ablation_seconds": ablation_seconds,
        "fit_seconds": time.perf_counter() - t0,
    }
    for note in notes:
        log.warning("%s", note)
    prov = provenance(
        LEARNED_SCHEMA, {"generation": cfg.to_dict(), "attribution": {"target": target}}, cfg.seed, notes=notes
    )
    save_json(record, weights_path, prov)
    log.info(
        "learned attention on %d training answers: Pearson ρ %.3f fitted, %.3f held out (every head alike: %.3f, %.3f)",
        len(examples),
        fit.fit_correlation,
        fit.heldout_correlation,
        fit.uniform_fit_correlation,
        fit.uniform_heldout_correlation,
    )
    return record
