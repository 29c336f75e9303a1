"""Rules of ``workflow/rules/generation.smk``: the generation study (``studies: [generation]``, ``data.task:
generation``) — a causal language model's answers, the ablations of their contexts, every answer method's source
scores, and their judgement.

The responses and every ablation's answer scores are computed once, by ``generate_answers`` and ``ablate_contexts``,
and every method and metric reads them: leave-one-out and the surrogate are scored from the cached ablations, the
linear datamodeling score from the cached held-out ones. Only the top-``k`` removals, which depend on the methods'
rankings, are run by ``judge_answers`` (once per distinct mask of an answer).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from attnlens.attribution.ablation import ablation_log_probs, answer_token_log_probs
from attnlens.attribution.answer_leaderboard import (
    ANSWER_LEADERBOARD_SCHEMA,
    answer_metrics,
    judge_answer,
    removal_masks,
)
from attnlens.attribution.answers import Ablated, AnswerExample, explain_answer
from attnlens.attribution.leaderboard import EXAMPLE_COLUMNS
from attnlens.attribution.leaderboard import summarise as summarise_leaderboard
from attnlens.attribution.methods import label
from attnlens.attribution.surrogate import ablation_masks, answer_scores, leave_one_out_masks
from attnlens.data.context import Source
from attnlens.data.sources import RATIONALES_SCHEMA, load_examples
from attnlens.device import place
from attnlens.errors import InputError
from attnlens.generator.decoding import generation_metrics, greedy_answers, normalized
from attnlens.generator.prompts import answer_ids, encode_prompt, end_token
from attnlens.generator.training import TrainingExample, train_generator
from attnlens.io import (
    StrPath,
    atomic_dir,
    load_json,
    load_parquet,
    provenance,
    save_json,
    save_parquet,
    save_pretrained,
)
from attnlens.models.loading import build_generator, load_causal_lm
from attnlens.pipeline.config import FiguresConfig, GenerationConfig, ModelConfig
from attnlens.render.answers import answer_page, explorer_index
from attnlens.render.figures import plot_leaderboard, save_figure
from attnlens.render.tables import leaderboard_table, write_table

log = logging.getLogger(__name__)

GENERATOR_SCHEMA = "generator/v1"
GENERATOR_METRICS_SCHEMA = "generator_metrics/v1"
RESPONSES_SCHEMA = "generation_responses/v1"
ABLATIONS_SCHEMA = "generation_ablations/v1"
ANSWER_SCORES_SCHEMA = "answer_scores/v1"
JUDGED_SCHEMA = "answer_judgements/v1"

#: Example ``k``'s random masks are drawn from ``RandomState(seed + MASK_STRIDE · k + i)``: disjoint seeds for up to
#: this many masks an answer (the surrogate's and the held-out ones).
MASK_STRIDE = 100_003

RESPONSE_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("context", pa.string()),
        ("question", pa.string()),
        ("reference", pa.string()),
        ("answer", pa.string()),
        ("target", pa.string()),
        ("exact_match", pa.float64()),
        ("input_ids", pa.list_(pa.int32())),
        ("answer_length", pa.int32()),
        ("owner", pa.list_(pa.int32())),
        ("source_start", pa.list_(pa.int64())),
        ("source_end", pa.list_(pa.int64())),
        ("source_kind", pa.list_(pa.int32())),
        ("planted", pa.list_(pa.bool_())),
        ("token_log_probs", pa.list_(pa.float64())),
        ("log_prob", pa.float64()),
        ("logit", pa.float64()),
        ("cut_sources", pa.int32()),
        ("cut_tokens", pa.int32()),
    ]
)
ABLATION_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("kind", pa.string()),  # random (the surrogate's), heldout (the LDS's), leave_one_out
        ("masks", pa.list_(pa.list_(pa.bool_()))),
        ("token_log_probs", pa.list_(pa.list_(pa.float64()))),
        ("seconds", pa.float64()),
    ]
)
SCORE_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("method", pa.string()),
        ("scores", pa.list_(pa.float64())),
        ("seconds", pa.float64()),
        ("forward_seconds", pa.float64()),
        ("n_forwards", pa.int64()),
        ("n_backwards", pa.int64()),
        ("peak_bytes", pa.int64()),
        ("explained", pa.float64()),
        ("delta", pa.float64()),
    ]
)


def _generation_keys(cfg: GenerationConfig) -> dict:
    return {"generation": cfg.to_dict()}


# --- train_generator ---------------------------------------------------------------------------------------------


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
        }
    )
    log.info(
        "held-out: exact match %.3f, answer log-probability %.3f, unfinished %.3f (%d answers)",
        metrics["exact_match"],
        metrics["mean_answer_log_prob"],
        metrics["unfinished"],
        metrics["n"],
    )
    section = {"model": model_cfg.to_dict(), **_generation_keys(cfg)}
    save_pretrained(model.cpu(), tokenizer, model_dir, provenance(GENERATOR_SCHEMA, section, model_cfg.seed))
    save_json(metrics, metrics_path, provenance(GENERATOR_METRICS_SCHEMA, section, model_cfg.seed))
    return metrics


def _training_example(tokenizer, row, cfg: GenerationConfig, positions: int) -> TrainingExample:
    answer = answer_ids(tokenizer, str(row.label), end=True)
    prompt = encode_prompt(
        tokenizer,
        str(row.example_id),
        str(row.text),
        str(row.question),
        sources=cfg.sources,
        template=cfg.template,
        max_positions=positions,
        reserve=len(answer),
        given=getattr(row, "sources", None),
    )
    return TrainingExample(prompt.input_ids, answer)


def _greedy(model, tokenizer, frame: pd.DataFrame, cfg: GenerationConfig, positions: int):
    """Each example's prompt (room left for ``generation.max_new_tokens``) and the model's greedy answer to it."""
    prompts = [
        encode_prompt(
            tokenizer,
            str(r.example_id),
            str(r.text),
            str(r.question),
            sources=cfg.sources,
            template=cfg.template,
            max_positions=positions,
            reserve=cfg.max_new_tokens,
            given=getattr(r, "sources", None),
        )
        for r in frame.itertuples(index=False)
    ]
    answers = greedy_answers(
        model,
        [p.input_ids for p in prompts],
        max_new_tokens=cfg.max_new_tokens,
        end=end_token(tokenizer),
        pad=tokenizer.pad_token_id,
        batch_size=cfg.batch_size,
    )
    return prompts, answers


def _held_out_metrics(model, tokenizer, test_df: pd.DataFrame, cfg: GenerationConfig, positions: int) -> dict:
    prompts, answers = _greedy(model, tokenizer, test_df, cfg, positions)
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


def run_generate_answers(
    cfg: GenerationConfig,
    target: str,
    device: str,
    model_dir: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    responses_path: StrPath,
) -> pd.DataFrame:
    """Rule ``generate_answers``: the explained answers of the first ``generation.n_examples`` test examples — the
    model's greedy answer (``attribution.target: predicted``) or the reference (``true``) — with each prompt's
    sources, the planted ones flagged, and the answer's log-probability and logit. Prompts cut to the model's
    positions, and greedy answers left unfinished, are counted in the run notes."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    positions = int(model.config.max_position_embeddings)
    test_df, _ = load_examples(test_path)
    rationales, _ = load_parquet(rationales_path, RATIONALES_SCHEMA)
    chosen = test_df.head(cfg.n_examples)
    prompts, greedy = _greedy(model, tokenizer, chosen, cfg, positions)
    rows, unfinished, empty = [], [], []
    for r, prompt, g in zip(chosen.itertuples(index=False), prompts, greedy, strict=True):
        reference = str(r.label)
        if target == "true":
            ids = answer_ids(tokenizer, reference)
        elif not g.finished:
            unfinished.append(str(r.example_id))
            continue
        else:
            ids = list(g.ids)
        if not ids:
            empty.append(str(r.example_id))
            continue
        kinds, planted = _planted(rationales[rationales["example_id"] == r.example_id], prompt.sources, prompt.offset)
        rows.append(
            {
                "example_id": str(r.example_id),
                "context": prompt.context,
                "question": prompt.question,
                "reference": reference,
                "answer": reference if target == "true" else tokenizer.decode(ids, skip_special_tokens=True).strip(),
                "target": target,
                "exact_match": float(
                    normalized(tokenizer, g.ids) == normalized(tokenizer, answer_ids(tokenizer, reference))
                ),
                "input_ids": prompt.input_ids + ids,
                "answer_length": len(ids),
                "owner": [*prompt.owner.tolist(), *([-1] * len(ids))],
                "source_start": [s.start for s in prompt.sources],
                "source_end": [s.end for s in prompt.sources],
                "source_kind": kinds,
                "planted": planted,
                "cut_sources": prompt.cut_sources,
                "cut_tokens": prompt.cut_tokens,
            }
        )
    if not rows:
        raise InputError(
            str(test_path),
            "answers",
            f"expected an answer to explain, got none of {len(chosen)}: {len(unfinished)} not finished within "
            f"generation.max_new_tokens {cfg.max_new_tokens}, {len(empty)} empty",
        )
    token_lp = answer_token_log_probs(
        model, [row["input_ids"] for row in rows], [row["answer_length"] for row in rows], batch_size=cfg.batch_size
    )
    for row, lp in zip(rows, token_lp, strict=True):
        log_p, logit = answer_scores(lp)
        row.update(token_log_probs=lp.tolist(), log_prob=float(log_p), logit=float(logit))
    frame = pd.DataFrame(rows)
    notes = _response_notes(frame, unfinished, empty, cfg, positions)
    if not getattr(tokenizer, "chat_template", None):
        notes.append("the tokenizer has no chat template: each prompt is generation.template alone")
    for note in notes:
        log.warning("%s", note)
    prov = provenance(
        RESPONSES_SCHEMA, {**_generation_keys(cfg), "attribution": {"target": target}}, cfg.seed, notes=notes
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


def _planted(rationales: pd.DataFrame, sources: Sequence[Source], offset: int) -> tuple[list[int], list[bool]]:
    """Each source's planted kind (the ``phrase_label`` of a planted sentence inside it; −1 for none) and whether
    it holds planted evidence (the answer's sentence; the supporting sentence of a two-hop question)."""
    kinds, planted = [], []
    for s in sources:
        a, b = s.start + offset, s.end + offset
        inside = rationales[(rationales["char_start"] < b) & (rationales["char_end"] > a)]
        kinds.append(int(inside["phrase_label"].iloc[0]) if len(inside) else -1)
        planted.append(bool(inside["evidence"].any()) if len(inside) else False)
    return kinds, planted


def _response_notes(frame: pd.DataFrame, unfinished: list[str], empty: list[str], cfg, positions: int) -> list[str]:
    notes = []
    if unfinished:
        notes.append(
            f"{len(unfinished)} greedy answers not finished within generation.max_new_tokens {cfg.max_new_tokens} "
            f"were left out (first: {unfinished[0]})"
        )
    if empty:
        notes.append(f"{len(empty)} empty answers were left out (first: {empty[0]})")
    cut = frame[frame["cut_sources"] > 0]
    if len(cut):
        notes.append(
            f"{len(cut)} of {len(frame)} prompts were cut to the model's {positions} positions: "
            f"{int(cut['cut_sources'].sum())} sources ({int(cut['cut_tokens'].sum())} tokens) left out of their "
            "contexts"
        )
    return notes


# --- ablate_contexts ---------------------------------------------------------------------------------------------


def _sources(row) -> list[Source]:
    return [Source(int(a), int(b), row.context[a:b]) for a, b in zip(row.source_start, row.source_end, strict=True)]


def random_masks(cfg: GenerationConfig, k: int, n_sources: int) -> tuple[np.ndarray, np.ndarray]:
    """Answer ``k``'s random masks: the surrogate's ``n_ablations``, then the ``n_heldout`` of the linear
    datamodeling score, mask ``i`` from ``RandomState(seed + MASK_STRIDE · k + i)``."""
    if cfg.n_ablations + cfg.n_heldout > MASK_STRIDE:
        raise InputError("config", "generation.n_heldout", f"expected at most {MASK_STRIDE} masks an answer in all")
    base = cfg.seed + MASK_STRIDE * k
    masks = ablation_masks(n_sources, cfg.n_ablations + cfg.n_heldout, base, cfg.keep)
    return masks[: cfg.n_ablations], masks[cfg.n_ablations :]


def run_ablate_contexts(
    cfg: GenerationConfig, device: str, model_dir: StrPath, responses_path: StrPath, ablations_path: StrPath
) -> pd.DataFrame:
    """Rule ``ablate_contexts``: every answer's token log-probabilities on its context with sources removed
    (``generation.removal``) — the surrogate's random ablations, the held-out ones and leave-one-out — and the
    wall seconds of each kind's forwards."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    rows = []
    for k, row in enumerate(responses.itertuples(index=False)):
        sources = _sources(row)
        answer = list(row.input_ids[len(row.input_ids) - row.answer_length :])
        train, heldout = random_masks(cfg, k, len(sources))
        for kind, masks in (
            ("random", train),
            ("heldout", heldout),
            ("leave_one_out", leave_one_out_masks(len(sources))),
        ):
            t0 = time.perf_counter()
            lp = ablation_log_probs(
                model,
                tokenizer,
                row.context,
                sources,
                row.question,
                answer,
                masks,
                cfg.removal,
                cfg.template,
                cfg.batch_size,
            )
            rows.append(
                {
                    "example_id": row.example_id,
                    "kind": kind,
                    "masks": masks.tolist(),
                    "token_log_probs": lp.tolist(),
                    "seconds": time.perf_counter() - t0,
                }
            )
    frame = pd.DataFrame(rows)
    save_parquet(frame, ablations_path, provenance(ABLATIONS_SCHEMA, _generation_keys(cfg), cfg.seed), ABLATION_COLUMNS)
    log.info("%d answers, %d ablations", len(responses), sum(len(r["masks"]) for r in rows))
    return frame


def _ablated(ablations: pd.DataFrame, example_id: str, kind: str, score: str) -> Ablated:
    row = ablations[(ablations["example_id"] == example_id) & (ablations["kind"] == kind)].iloc[0]
    masks = np.array([list(m) for m in row["masks"]], dtype=bool)
    lp = np.array([list(t) for t in row["token_log_probs"]], dtype=np.float64)
    log_p, logit = answer_scores(lp) if len(lp) else (np.zeros(0), np.zeros(0))
    return Ablated(masks, log_p if score == "log_prob" else logit, float(row["seconds"]))


# --- explain_answers ---------------------------------------------------------------------------------------------


def run_explain_answers(
    cfg: GenerationConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    ablations_path: StrPath,
    scores_path: StrPath,
) -> pd.DataFrame:
    """Rule ``explain_answers``: every method of ``generation.methods`` scores every answer's sources; what each
    cost (seconds, forwards, backwards, peak memory) and one plain forward's seconds beside it."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    dev = place(model, device)
    for p in model.parameters():
        p.requires_grad_(False)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    ablations, _ = load_parquet(ablations_path, ABLATIONS_SCHEMA, ABLATION_COLUMNS)
    rows = []
    for row in responses.itertuples(index=False):
        x = _answer_example(model, tokenizer, row, ablations, cfg, dev)
        res = explain_answer(x, cfg.methods)
        for method in cfg.methods:
            rows.append(
                {
                    "example_id": row.example_id,
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
            )
    frame = pd.DataFrame(rows)
    save_parquet(frame, scores_path, provenance(ANSWER_SCORES_SCHEMA, _generation_keys(cfg), cfg.seed), SCORE_COLUMNS)
    log.info("%d answers, methods %s", len(responses), list(cfg.methods))
    return frame


def _answer_example(model, tokenizer, row, ablations: pd.DataFrame, cfg: GenerationConfig, device) -> AnswerExample:
    return AnswerExample(
        model=model,
        input_ids=torch.as_tensor(np.asarray(row.input_ids, dtype=np.int64))[None].to(device),
        answer_length=int(row.answer_length),
        owner=np.asarray(row.owner, dtype=np.int64),
        n_sources=len(row.source_start),
        full_score=float(row.log_prob if cfg.score == "log_prob" else row.logit),
        n_answer_tokens=int(row.answer_length),
        leave_one_out=_ablated(ablations, row.example_id, "leave_one_out", cfg.score),
        random=_ablated(ablations, row.example_id, "random", cfg.score),
        pad_id=int(tokenizer.pad_token_id),
        pool_k=cfg.pool_k,
        ig_steps=cfg.ig_steps,
        batch_size=cfg.batch_size,
        alpha=cfg.alpha,
    )


# --- judge_answers -----------------------------------------------------------------------------------------------


def run_judge_answers(
    cfg: GenerationConfig,
    device: str,
    model_dir: StrPath,
    responses_path: StrPath,
    ablations_path: StrPath,
    scores_path: StrPath,
    judged_path: StrPath,
) -> pd.DataFrame:
    """Rule ``judge_answers``: per answer and method, the top-``k`` drops (the removals run once per distinct mask),
    the linear datamodeling score on the held-out ablations, precision and recall at ``k`` against the planted
    sources, and the cost."""
    model, tokenizer = load_causal_lm(str(model_dir), "model_dir")
    place(model, device)
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    ablations, _ = load_parquet(ablations_path, ABLATIONS_SCHEMA, ABLATION_COLUMNS)
    scored, _ = load_parquet(scores_path, ANSWER_SCORES_SCHEMA, SCORE_COLUMNS)
    ks = tuple(cfg.top_k)
    rows: list[tuple] = []
    for row in responses.itertuples(index=False):
        mine = scored[scored["example_id"] == row.example_id]
        scores = {m.method: np.asarray(m.scores, dtype=np.float64) for m in mine.itertuples(index=False)}
        masks, where = removal_masks(scores, ks)
        answer = list(row.input_ids[len(row.input_ids) - row.answer_length :])
        lp = ablation_log_probs(
            model,
            tokenizer,
            row.context,
            _sources(row),
            row.question,
            answer,
            masks,
            cfg.removal,
            cfg.template,
            cfg.batch_size,
        )
        log_p, logit = answer_scores(lp)
        removed = log_p if cfg.score == "log_prob" else logit
        full = float(row.log_prob if cfg.score == "log_prob" else row.logit)
        heldout = _ablated(ablations, row.example_id, "heldout", cfg.score)
        planted = np.asarray(row.planted, dtype=bool)
        rows += judge_answer(row.example_id, scores, ks, full, removed, where, heldout.masks, heldout.scores, planted)
        for m in mine.itertuples(index=False):
            rows += [
                (row.example_id, m.method, "seconds", m.seconds, np.nan),
                (row.example_id, m.method, "cost_ratio", m.seconds / m.forward_seconds, np.nan),
                (row.example_id, m.method, "forwards", float(m.n_forwards), np.nan),
                (row.example_id, m.method, "backwards", float(m.n_backwards), np.nan),
                (row.example_id, m.method, "peak_mib", m.peak_bytes / 2**20, np.nan),
            ]
    frame = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS))
    save_parquet(frame, judged_path, provenance(JUDGED_SCHEMA, _generation_keys(cfg), cfg.seed))
    log.info("%d answers judged", len(responses))
    return frame


# --- answer_leaderboard and answer_explorer (light) --------------------------------------------------------------


def run_answer_leaderboard(
    cfg: GenerationConfig,
    figures: FiguresConfig,
    judged_path: StrPath,
    summary_path: StrPath,
    tables_dir: StrPath,
    figure_stem: StrPath,
) -> pd.DataFrame:
    """Rule ``answer_leaderboard``: per method and metric, the mean over the answers with a paired bootstrap 95 %
    interval and a paired Wilcoxon test against ``generation.baseline``; its table and figure."""
    judged, _ = load_parquet(judged_path, JUDGED_SCHEMA)
    columns = answer_metrics(tuple(cfg.top_k))
    notes = []
    if cfg.baseline not in cfg.methods:
        notes.append(f"no paired tests: generation.baseline {cfg.baseline!r} is not in generation.methods")
    summary = summarise_leaderboard(judged, columns, cfg.baseline, cfg.seed, cfg.n_bootstrap)
    n = judged["example_id"].nunique()
    prov = provenance(ANSWER_LEADERBOARD_SCHEMA, _generation_keys(cfg), cfg.seed, n_answers=n, notes=notes)
    save_parquet(summary, summary_path, prov)
    caption = (
        f"what a generated answer rests on, over {n} answers: mean [bootstrap 95 % interval]; top-k drop = fall of "
        f"the answer's {cfg.score} without the method's top k sources ({cfg.removal}d); LDS = Spearman ρ on "
        f"{cfg.n_heldout} held-out random ablations; precision/recall against the planted sources; * paired "
        f"Wilcoxon p < 0.05 against {cfg.baseline}"
    )
    tables = Path(tables_dir)
    write_table(leaderboard_table(summary, columns), tables / "answer_leaderboard", caption)
    write_table(summary, tables / "answer_leaderboard_long", f"{caption} (every number)")
    save_figure(plot_leaderboard(summary, columns, cfg.baseline), figure_stem, figures.dpi)
    for note in notes:
        log.warning("%s", note)
    return summary


def showcase(responses: pd.DataFrame, n: int) -> list[tuple[str, str]]:
    """``(example_id, why)`` of the answers that get an explorer page: the most probable right answer, the least
    probable wrong one, then the rest in order, ``n`` in all."""
    right = responses[responses["exact_match"] == 1.0]
    wrong = responses[responses["exact_match"] != 1.0]
    picks: list[tuple[str, str]] = []
    if len(right):
        picks.append((str(right.loc[right["log_prob"].idxmax(), "example_id"]), "the most probable right answer"))
    if len(wrong):
        picks.append((str(wrong.loc[wrong["log_prob"].idxmin(), "example_id"]), "the least probable wrong answer"))
    for eid in responses["example_id"]:
        if len(picks) >= n:
            break
        if all(eid != p for p, _ in picks):
            picks.append((str(eid), "in the test split's order"))
    return picks[:n]


def run_answer_explorer(
    cfg: GenerationConfig, responses_path: StrPath, scores_path: StrPath, metrics_path: StrPath, out_dir: StrPath
) -> list[str]:
    """Rule ``answer_explorer``: one page per showcased answer (``generation.showcase``) with its context's sources
    coloured by every method beside the question, the answer and the reference, and an index page."""
    responses, _ = load_parquet(responses_path, RESPONSES_SCHEMA, RESPONSE_COLUMNS)
    scored, _ = load_parquet(scores_path, ANSWER_SCORES_SCHEMA, SCORE_COLUMNS)
    metrics = load_json(metrics_path, GENERATOR_METRICS_SCHEMA)
    picks = showcase(responses, cfg.showcase)
    pages = []
    with atomic_dir(out_dir) as tmp:
        for eid, why in picks:
            row = responses[responses["example_id"] == eid].iloc[0]
            mine = scored[scored["example_id"] == eid]
            methods = [
                (m, label(m), np.asarray(s, dtype=np.float64))
                for m, s in zip(mine["method"], mine["scores"], strict=True)
            ]
            name = f"{eid}.html"
            (tmp / name).write_text(answer_page(row, methods, why), encoding="utf-8")
            pages.append((name, eid, why, str(row["answer"]), float(row["exact_match"])))
        (tmp / "index.html").write_text(explorer_index(pages, metrics), encoding="utf-8")
    return [p[0] for p in pages]
