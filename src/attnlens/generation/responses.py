"""An example's prompt, the model's answer to it and the answer's scores with sources removed, as the generation
study explains it: the responses (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) that rule
``generate_answers`` writes, learned attention fits on and the ``cite`` door explains one of, and their ablations
(rules ``ablate_contexts``, ``judge_answers``, ``fit_learned_attention``, ``answer_sanity`` and the ``cite`` door).
``cfg`` is the ``generation`` section (any object with its keys).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from attnlens.attribution.datamodels import answer_scores
from attnlens.errors import InputError
from attnlens.generation.ablation import ablation_log_probs, answer_token_log_probs
from attnlens.generation.answer_artifacts import answer_of, response_sources
from attnlens.generation.decoding import greedy_answers, normalized
from attnlens.generation.prompts import (
    AnswerPrompt,
    answer_ids,
    completion_notes,
    encode_prompt,
    end_token,
    stop_strings,
)
from attnlens.tasks.contexts import PromptFormat, Source


def example_prompt(tokenizer, row, cfg, positions: int, reserve: int) -> AnswerPrompt:
    """An example's prompt (:func:`~attnlens.generation.prompts.encode_prompt`), ``reserve`` positions left."""
    return encode_prompt(
        tokenizer,
        str(row.example_id),
        str(row.text),
        str(row.question),
        sources=cfg.sources,
        form=PromptFormat.of(cfg),
        max_positions=positions,
        reserve=reserve,
        given=getattr(row, "sources", None),
    )


def prompts_and_answers(model, tokenizer, frame: pd.DataFrame, cfg, positions: int):
    """Each example's prompt (room left for ``generation.max_new_tokens``) and the model's greedy answer to it."""
    prompts = [example_prompt(tokenizer, r, cfg, positions, cfg.max_new_tokens) for r in frame.itertuples(index=False)]
    answers = greedy_answers(
        model,
        [p.input_ids for p in prompts],
        max_new_tokens=cfg.max_new_tokens,
        end=end_token(tokenizer),
        pad=tokenizer.pad_token_id,
        batch_size=cfg.batch_size,
        stop=stop_strings(cfg.stop, tokenizer),
        tokenizer=tokenizer,
    )
    return prompts, answers


def responses(
    model,
    tokenizer,
    chosen: pd.DataFrame,
    cfg,
    target: str,
    rationales: pd.DataFrame | None,
    where: str,
) -> tuple[pd.DataFrame, list[str]]:
    """The responses (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) of the examples ``chosen``: each
    prompt, the greedy answer (``target`` = ``predicted``) or the reference (``true``), the sources (flagged
    planted from ``rationales``; none flagged without them) and the answer's scores; and the run notes on the
    answers left out and the prompts cut."""
    positions = int(model.config.max_position_embeddings)
    prompts, greedy = prompts_and_answers(model, tokenizer, chosen, cfg, positions)
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
        mine = None if rationales is None else rationales[rationales["example_id"] == r.example_id]
        kinds, planted = _planted(mine, prompt.sources, prompt.offset)
        exact = normalized(tokenizer, g.ids) == normalized(tokenizer, answer_ids(tokenizer, reference))
        rows.append(_row(tokenizer, str(r.example_id), prompt, ids, reference, target, float(exact), kinds, planted))
    if not rows:
        raise InputError(
            where,
            "answers",
            f"expected an answer to explain, got none of {len(chosen)}: {len(unfinished)} not finished within "
            f"generation.max_new_tokens {cfg.max_new_tokens}, {len(empty)} empty",
        )
    _score(model, rows, cfg.batch_size)
    frame = pd.DataFrame(rows)
    return frame, _response_notes(frame, unfinished, empty, cfg, positions)


def one_response(
    model, tokenizer, context: str, question: str, answer: str | None, cfg
) -> tuple[pd.Series, bool, list[str]]:
    """One response, as the ``cite`` door explains it: the model's greedy answer to ``question`` from ``context``
    (explained as it stands where it did not finish within ``generation.max_new_tokens``) or the ``answer`` given;
    whether it finished, and the notes on what was cut or left unfinished."""
    positions = int(model.config.max_position_embeddings)
    prompt = encode_prompt(
        tokenizer,
        "answer",
        context,
        question,
        sources=cfg.sources,
        form=PromptFormat.of(cfg),
        max_positions=positions,
        reserve=cfg.max_new_tokens,
    )
    notes = []
    if prompt.cut_sources:
        notes.append(
            f"{prompt.cut_sources} sources ({prompt.cut_tokens} tokens) were left out of the context: the prompt "
            f"was cut to the model's {positions} positions"
        )
    notes += completion_notes(tokenizer, cfg.stop)
    if answer is None:
        (g,) = greedy_answers(
            model,
            [prompt.input_ids],
            max_new_tokens=cfg.max_new_tokens,
            end=end_token(tokenizer),
            pad=tokenizer.pad_token_id,
            batch_size=1,
            stop=stop_strings(cfg.stop, tokenizer),
            tokenizer=tokenizer,
        )
        ids, finished = list(g.ids), g.finished  # without the end token
        if not finished:
            notes.append(
                f"the answer did not finish within generation.max_new_tokens {cfg.max_new_tokens}: explained as it "
                "stands"
            )
    else:
        ids, finished = answer_ids(tokenizer, answer), True
    if not ids:
        raise InputError("answer", "(text)", "expected the model to answer, got an empty answer")
    n = len(prompt.sources)
    target = "predicted" if answer is None else "true"
    row = _row(tokenizer, "answer", prompt, ids, answer or "", target, float("nan"), [-1] * n, [False] * n)
    _score(model, [row], cfg.batch_size)
    return pd.Series(row), finished, notes


def _row(tokenizer, example_id: str, prompt: AnswerPrompt, ids, reference: str, target: str, exact, kinds, planted):
    """A response row (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) before its scores
    (:func:`_score`)."""
    return {
        "example_id": example_id,
        "context": prompt.context,
        "question": prompt.question,
        "reference": reference,
        "answer": reference if target == "true" else tokenizer.decode(ids, skip_special_tokens=True).strip(),
        "target": target,
        "exact_match": exact,
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


def _score(model, rows: list[dict], batch_size: int) -> None:
    """Each row's answer token log-probabilities, its log-probability and its logit."""
    token_lp = answer_token_log_probs(
        model, [row["input_ids"] for row in rows], [row["answer_length"] for row in rows], batch_size=batch_size
    )
    for row, lp in zip(rows, token_lp, strict=True):
        log_p, logit = answer_scores(lp)
        row.update(token_log_probs=lp.tolist(), log_prob=float(log_p), logit=float(logit))


def _planted(rationales: pd.DataFrame | None, sources: Sequence[Source], offset: int) -> tuple[list[int], list[bool]]:
    """Each source's planted kind (the ``phrase_label`` of a planted sentence inside it; −1 for none) and whether
    it holds planted evidence (the answer's sentence; the supporting sentence of a two-hop question)."""
    if rationales is None:
        return [-1] * len(sources), [False] * len(sources)
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


def ablate(model, tokenizer, row, masks: np.ndarray, cfg) -> np.ndarray:
    """``(masks, answer tokens)``: a response row's answer token log-probabilities on its context with each mask's
    removed sources taken out (``generation.removal``), from the shared prefix."""
    return ablation_log_probs(
        model,
        tokenizer,
        row.context,
        response_sources(row),
        row.question,
        answer_of(row),
        masks,
        cfg.removal,
        PromptFormat.of(cfg),
        cfg.batch_size,
    )


def timed_ablations(
    model, tokenizer, row, kinds: Mapping[str, np.ndarray], cfg
) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
    """``{kind: (masks, token log-probabilities, seconds)}``: :func:`ablate` of each kind's masks (the surrogate's
    random ones, the held-out ones, leave-one-out's) and the wall seconds its forwards took."""
    out = {}
    for kind, masks in kinds.items():
        t0 = time.perf_counter()
        lp = ablate(model, tokenizer, row, masks, cfg)
        out[kind] = (masks, lp, time.perf_counter() - t0)
    return out
