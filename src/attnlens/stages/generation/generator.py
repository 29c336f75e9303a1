"""Rules ``train_generator`` and ``generate_answers``: the causal language model that answers from a context, and the
answers the study explains."""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd

from attnlens.data.sources import RATIONALES_SCHEMA, load_examples
from attnlens.device import cpu_kernels, place
from attnlens.errors import InputError
from attnlens.generation.ablation import answer_token_log_probs
from attnlens.generation.answer_artifacts import (
    GENERATOR_METRICS_SCHEMA,
    GENERATOR_SCHEMA,
    RESPONSE_COLUMNS,
    RESPONSES_SCHEMA,
)
from attnlens.generation.decoder_training import TrainingExample, train_generator
from attnlens.generation.decoding import generation_metrics
from attnlens.generation.prompts import answer_ids, completion_notes
from attnlens.generation.responses import answer_parts, example_prompt, prompts_and_answers, responses
from attnlens.io import StrPath, load_json, load_parquet, provenance, save_json, save_parquet, save_pretrained
from attnlens.models.loading import build_generator, load_causal_lm
from attnlens.pipeline.config import GenerationConfig, ModelConfig
from attnlens.pipeline.entry import stage

log = logging.getLogger(__name__)


# --- train_generator ---------------------------------------------------------------------------------------------


@stage("model", "generation")
def run_train_generator(
    model_cfg: ModelConfig,
    cfg: GenerationConfig,
    train_path: StrPath,
    test_path: StrPath,
    model_dir: StrPath,
    metrics_path: StrPath,
) -> dict:
    """Rule ``train_generator``: the causal language model (``model.source``: drawn and trained from scratch on the
    training split's answers, or a pretrained one as it is), and what it learned — exact match of its greedy answers
    and the reference answers' mean log-probability on the test split."""
    model, tokenizer = build_generator(
        model_cfg, cfg.scratch.hidden_size, cfg.scratch.num_layers, cfg.scratch.num_heads
    )
    device = place(model, model_cfg.device)
    positions = int(model.config.max_position_embeddings)
    train_df, _ = load_examples(train_path)
    test_df, _ = load_examples(test_path)
    losses: list[float] = []
    trained = model_cfg.source == "from_config"
    if trained:
        examples = [_training_example(tokenizer, row, cfg, positions) for row in train_df.itertuples(index=False)]
        t0 = time.perf_counter()
        losses = train_generator(
            model,
            examples,
            steps=cfg.train.steps,
            batch_size=cfg.train.batch_size,
            learning_rate=cfg.train.learning_rate,
            warmup=cfg.train.warmup,
            seed=cfg.train.seed,
            pad=tokenizer.pad_token_id,
        )
        log.info("trained %d steps in %.1f s", cfg.train.steps, time.perf_counter() - t0)
    model.eval()
    metrics = _held_out_metrics(model, tokenizer, test_df, cfg, positions)
    metrics.update(
        {
            "trained_from_scratch": trained,
            "steps": cfg.train.steps if trained else 0,
            "final_loss": float(np.mean(losses[-max(1, len(losses) // 10) :])) if losses else None,
            "n_parameters": int(sum(p.numel() for p in model.parameters())),
            "device": str(device),
            "cpu_kernels": cpu_kernels() if device.type == "cpu" else None,
        }
    )
    log.info(
        "held-out: exact match %.3f, answer log-probability %.3f, unfinished %.3f (%d answers)",
        metrics["exact_match"],
        metrics["mean_answer_log_prob"],
        metrics["unfinished"],
        metrics["n"],
    )
    section = {"model": model_cfg.to_dict(), "generation": cfg.to_dict()}
    notes = [_training_note(metrics, cfg)] if trained else []
    save_pretrained(model.cpu(), tokenizer, model_dir, provenance(GENERATOR_SCHEMA, section, model_cfg.seed))
    save_json(metrics, metrics_path, provenance(GENERATOR_METRICS_SCHEMA, section, model_cfg.seed, notes=notes))
    return metrics


def _training_note(metrics: dict, cfg: GenerationConfig) -> str:
    """The run note of a decoder trained here: what its figures rest on, and that they move with it."""
    where = f"the CPU kernels {metrics['cpu_kernels']}" if metrics["cpu_kernels"] else metrics["device"]
    return (
        f"the decoder was trained from scratch ({metrics['steps']} steps, generation.train.seed {cfg.train.seed}, on "
        f"{where}) to held-out exact match {metrics['exact_match']:.3f}: the answers and every figure of the study "
        "rest on this training, and move with its seed and the machine's float rounding (docs/benchmarks.md gives "
        "their spread across seeds and kernel sets)"
    )


def _training_example(tokenizer, row, cfg: GenerationConfig, positions: int) -> TrainingExample:
    answer = answer_ids(tokenizer, str(row.label), end=True)
    return TrainingExample(example_prompt(tokenizer, row, cfg, positions, len(answer)).input_ids, answer)


def _held_out_metrics(model, tokenizer, test_df: pd.DataFrame, cfg: GenerationConfig, positions: int) -> dict:
    prompts, answers = prompts_and_answers(model, tokenizer, test_df, cfg, positions)
    references = [str(a) for a in test_df["label"]]
    ref_ids = [answer_ids(tokenizer, a, end=True) for a in references]
    log_probs = answer_token_log_probs(
        model,
        [p.input_ids + a for p, a in zip(prompts, ref_ids, strict=True)],
        [len(a) for a in ref_ids],
        batch_size=cfg.batch_size,
    )
    return generation_metrics(tokenizer, answers, references, [float(lp.sum()) for lp in log_probs])


# --- generate_answers --------------------------------------------------------------------------------------------


@stage("generation")
def run_generate_answers(
    cfg: GenerationConfig,
    target: str,
    device: str,
    model_dir: StrPath,
    metrics_path: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    responses_path: StrPath,
) -> pd.DataFrame:
    """Rule ``generate_answers``: the explained answers of the first ``generation.n_examples`` test examples — the
    model's greedy answer (``attribution.target: predicted``) or the reference (``true``) — with each prompt's
    sources, the planted ones flagged, and the answer's log-probability and logit. Prompts cut to the model's
    positions, and greedy answers left unfinished, are counted in the run notes. A decoder trained from scratch is
    explained only once it answers (:func:`check_learned`)."""
    check_learned(load_json(metrics_path, GENERATOR_METRICS_SCHEMA), cfg.min_exact_match, str(metrics_path))
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    test_df, _ = load_examples(test_path)
    rationales, _ = load_parquet(rationales_path, RATIONALES_SCHEMA)
    chosen = test_df.head(cfg.n_examples)
    frame, notes = responses(model, tokenizer, chosen, cfg, target, rationales, str(test_path), closed_book=True)
    frame, cut = answer_parts(tokenizer, frame, cfg.targets)
    notes += cut + completion_notes(tokenizer, cfg.stop)
    for note in notes:
        log.warning("%s", note)
    prov = provenance(
        RESPONSES_SCHEMA, {"generation": cfg.to_dict(), "attribution": {"target": target}}, cfg.seed, notes=notes
    )
    save_parquet(frame, responses_path, prov, RESPONSE_COLUMNS)
    log.info(
        "%d answers (%s), exact match %.3f, mean log-probability %.3f",
        len(frame),
        target,
        frame["exact_match"].mean(),
        frame["log_prob"].mean(),
    )
    return frame


def check_learned(metrics: dict, bar: float, where: str) -> None:
    """Refuse, in one line, to explain a decoder trained from scratch whose held-out exact match is under ``bar``
    (``generation.min_exact_match``): one that has not learned to answer from the context would make every method's
    verdict a verdict on an unfinished training run, which moves with the seed and the CPU's kernels. A pretrained
    model is explained as it answers, whatever its exact match."""
    if metrics["trained_from_scratch"] and metrics["exact_match"] < bar:
        raise InputError(
            where,
            "exact_match",
            f"expected at least generation.min_exact_match {bar:g} on the held-out questions before a decoder trained "
            f"from scratch is explained, got {metrics['exact_match']:.3f} of {metrics['n']} after "
            f"{metrics['steps']} steps: train it longer or at a lower rate (generation.train.steps, learning_rate) or "
            "lower the bar",
        )
