"""Answer spans as token arithmetic: a span ``(s, e)`` of the context, ``s ≤ e < s + L`` (``L``: the longest answer,
in tokens), scores ``start[s] + end[e]``; the readout lays every span's score out as one vector (:func:`span_scores`,
span ``(s, e)`` at :func:`span_index`), the best span inside the context is the answer (:func:`best_span`), and an
answer's characters become its tokens (:func:`token_span`; ``None`` for an answer cut away by truncation).

Plain NumPy; :func:`span_scores` works on a torch tensor with the tensor's own methods.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnlens.tasks.task import at_least_float32

#: The longest answer a span may be, in tokens (the SQuAD baselines' and Hugging Face's pipeline's default).
MAX_ANSWER_TOKENS = 30


def span_index(start: int, end: int, max_len: int = MAX_ANSWER_TOKENS) -> int:
    """Where span ``(start, end)`` sits in the readout's vector of span scores (:func:`span_scores`)."""
    if not 0 <= end - start < max_len:
        raise ValueError(f"a span of tokens {start}..{end} is not one of 1..{max_len} tokens")
    return start * max_len + (end - start)


def span_of(index: int, max_len: int = MAX_ANSWER_TOKENS) -> tuple[int, int]:
    """The span ``(start, end)`` at ``index`` of the span scores (the inverse of :func:`span_index`)."""
    start, length = divmod(int(index), max_len)
    return start, start + length


def span_scores(start_logits, end_logits, max_len: int = MAX_ANSWER_TOKENS):
    """``(batch, n · max_len)`` span scores from ``(batch, n)`` start and end logits (torch tensors or NumPy
    arrays): at :func:`span_index` ``(s, e)``, ``start[s] + end[e]``; spans that run past the last token are
    ``-inf``. Which spans are inside the context is the decoder's business (:func:`best_span`), not the readout's:
    an explained span is one the decoder chose, or the gold one."""
    if isinstance(start_logits, np.ndarray):
        n = start_logits.shape[-1]
        padded = np.concatenate([end_logits, np.full((*end_logits.shape[:-1], max_len - 1), -np.inf)], axis=-1)
        ends = np.lib.stride_tricks.sliding_window_view(padded, max_len, axis=-1)[..., :n, :]
        return (start_logits[..., :, None] + ends).reshape(*start_logits.shape[:-1], n * max_len)
    import torch  # noqa: PLC0415 (a light module: only a readout on tensors needs torch, and has it loaded)

    n = start_logits.shape[-1]
    pad = torch.full(
        (*end_logits.shape[:-1], max_len - 1), float("-inf"), dtype=end_logits.dtype, device=end_logits.device
    )
    ends = torch.cat([end_logits, pad], dim=-1).unfold(-1, max_len, 1)  # (…, n, max_len): end[s + l]
    return (start_logits.unsqueeze(-1) + ends).reshape(*start_logits.shape[:-1], n * max_len)


def spans_within(allowed: np.ndarray, max_len: int = MAX_ANSWER_TOKENS) -> np.ndarray:
    """``(n, max_len)`` bool: span ``(s, s + l)`` has every token ``allowed`` (a run of allowed tokens at least
    ``l + 1`` long starts at ``s``); laid out as :func:`span_index` lays out the spans."""
    allowed = np.asarray(allowed, dtype=bool)
    run = np.zeros(len(allowed) + 1, dtype=np.int64)
    for k in range(len(allowed) - 1, -1, -1):
        run[k] = run[k + 1] + 1 if allowed[k] else 0
    return np.arange(max_len)[None, :] < run[:-1, None]


def best_span(
    start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray, max_len: int = MAX_ANSWER_TOKENS
) -> tuple[int, int, float]:
    """The best-scoring span ``(s, e, score)`` whose tokens are all ``allowed`` (the context's), ``s ≤ e < s +
    max_len``; ties go to the earliest start, then the shortest span."""
    start = np.asarray(start_logits, dtype=np.float64)
    end = np.asarray(end_logits, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    if not allowed.any():
        raise ValueError("no token of the context to answer from")
    scores = span_scores(start[None], end[None], max_len)[0].reshape(len(start), max_len)
    scores = np.where(spans_within(allowed, max_len), scores, -np.inf)
    s, length = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(s), int(s + length), float(scores[s, length])


def token_span(
    offsets: Sequence[tuple[int, int]], context: np.ndarray, char_start: int, char_end: int
) -> tuple[int, int] | None:
    """The tokens ``(s, e)`` of the context that the answer's characters ``[char_start, char_end)`` fall on:
    ``offsets`` are each token's character span in the context (a fast tokenizer's ``offset_mapping``), ``context``
    marks the context's tokens. ``None`` when truncation cut any of the answer away: it reaches past the last
    context character a kept token covers."""
    kept = [(k, a, b) for k, (a, b) in enumerate(offsets) if context[k] and b > a]
    if not kept or char_start < kept[0][1] or char_end > kept[-1][2]:
        return None
    inside = [k for k, a, b in kept if a < char_end and b > char_start]
    return (inside[0], inside[-1]) if inside else None


#: An ``answers`` cell as a CSV holds it: JSON text, in either of the forms :func:`answer_list` reads.


def span_probabilities(scores):
    """The softmax over the last axis of span scores (:func:`span_scores`; ``-inf`` spans get 0): ``F`` of a
    question-answering model. A torch tensor in its own dtype, float32 at least; NumPy in float64."""
    if isinstance(scores, np.ndarray):
        x = np.asarray(scores, dtype=np.float64)
        top = np.max(x, axis=-1, keepdims=True)
        e = np.exp(x - top)
        return e / e.sum(axis=-1, keepdims=True)
    return at_least_float32(scores).softmax(-1)


def gold_spans(answers: Sequence, encoded) -> np.ndarray:
    """``(n, 2)`` int64 token spans ``(start, end)`` of each example's first gold answer that truncation left
    whole (:func:`token_span` over ``encoded``'s offsets in the context); ``(-1, -1)`` where none is left."""
    return np.array(
        [gold_span(cell, encoded.offsets[i], encoded.in_text[i]) for i, cell in enumerate(answers)], dtype=np.int64
    ).reshape(len(answers), 2)


def gold_span(answers, offsets, in_text) -> tuple[int, int]:
    """The token span of the first of one example's ``answers`` that truncation left whole; ``(-1, -1)`` else."""
    for answer in answers:
        start = int(answer["answer_start"])
        span = token_span(offsets, in_text, start, start + len(answer["text"]))
        if span is not None:
            return span
    return -1, -1
