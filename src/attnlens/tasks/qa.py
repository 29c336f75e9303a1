"""Extractive question answering: a span of the context answers the question (SQuAD's task, Longformer's
TriviaQA and HotpotQA readers).

The head gives every token a start and an end logit. A **span** ``(s, e)`` of the context, ``s ≤ e < s + L``
(``L``: the longest answer, in tokens), scores ``start[s] + end[e]``, and the predicted answer is the best-scoring
span inside the context — how Hugging Face's question-answering pipeline and the SQuAD baselines decode. What is
explained is that score: the readout ``F`` lays every span's score out as one vector (:func:`span_scores`, span
``(s, e)`` at :func:`span_index`), so a document's explained output is one index of it, as a class is one column
of a classifier's probabilities, and every method that takes a target takes a span.

The metrics are SQuAD's (Rajpurkar et al., 2016, the official v1.1 evaluation script's definitions): exact match
and token F1 of the answer text after :func:`normalize_answer`, the best over the gold answers. An answer cut
away by truncation has no token span (:func:`token_span` gives ``None``): it is counted and left out of the span
metrics, never scored as a miss.

Plain NumPy; :func:`span_scores` works on a torch tensor with the tensor's own methods.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

from attnlens.errors import InputError

#: The longest answer a span may be, in tokens (the SQuAD baselines' and Hugging Face's pipeline's default).
MAX_ANSWER_TOKENS = 30

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, punctuation removed, the articles *a*, *an*, *the* removed, runs of white
    space as one space."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    guess = normalize_answer(prediction)
    return float(any(guess == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str]) -> float:
    """The best, over the gold answers, F1 of the normalised prediction's words against the answer's (a bag of
    words: a word counts as often as it occurs in both); 0.0 where either side has no word."""
    guess = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        truth = normalize_answer(answer).split()
        common = sum((Counter(guess) & Counter(truth)).values())
        if common:
            precision, recall = common / len(guess), common / len(truth)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def qa_metrics(predictions: Sequence[str], answers: Sequence[Sequence[str]], truncated: Sequence[bool]) -> dict:
    """Exact match and token F1 (means over the questions, in [0, 1]) of the predicted answer texts against each
    question's gold answers, over the questions whose answer the model could read; ``n_truncated`` counts those
    left out because truncation cut their answer away."""
    kept = [k for k, cut in enumerate(truncated) if not cut]
    em = [exact_match(predictions[k], answers[k]) for k in kept]
    f1 = [token_f1(predictions[k], answers[k]) for k in kept]
    return {
        "exact_match": float(np.mean(em)) if kept else None,
        "f1": float(np.mean(f1)) if kept else None,
        "n_scored": len(kept),
        "n_truncated": len(truncated) - len(kept),
    }


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
    pad = torch.full((*end_logits.shape[:-1], max_len - 1), float("-inf"), dtype=end_logits.dtype,
                     device=end_logits.device)  # fmt: skip
    ends = torch.cat([end_logits, pad], dim=-1).unfold(-1, max_len, 1)  # (…, n, max_len): end[s + l]
    return (start_logits.unsqueeze(-1) + ends).reshape(*start_logits.shape[:-1], n * max_len)


def best_span(start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray,
              max_len: int = MAX_ANSWER_TOKENS) -> tuple[int, int, float]:  # fmt: skip
    """The best-scoring span ``(s, e, score)`` whose tokens are all ``allowed`` (the context's), ``s ≤ e < s +
    max_len``; ties go to the earliest start, then the shortest span."""
    start = np.asarray(start_logits, dtype=np.float64)
    end = np.asarray(end_logits, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    if not allowed.any():
        raise ValueError("no token of the context to answer from")
    scores = span_scores(start[None], end[None], max_len)[0].reshape(len(start), max_len)
    # span (s, s + l) is allowed when every one of its tokens is: a run of allowed tokens at least l + 1 long
    run = np.zeros(len(allowed) + 1, dtype=np.int64)
    for k in range(len(allowed) - 1, -1, -1):
        run[k] = run[k + 1] + 1 if allowed[k] else 0
    ok = np.arange(max_len)[None, :] < run[:-1, None]
    scores = np.where(ok, scores, -np.inf)
    s, length = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(s), int(s + length), float(scores[s, length])


def token_span(offsets: Sequence[tuple[int, int]], context: np.ndarray, char_start: int,
               char_end: int) -> tuple[int, int] | None:  # fmt: skip
    """The tokens ``(s, e)`` of the context that the answer's characters ``[char_start, char_end)`` fall on:
    ``offsets`` are each token's character span in the context (a fast tokenizer's ``offset_mapping``), ``context``
    marks the context's tokens. ``None`` when truncation cut any of the answer away: it reaches past the last
    context character a kept token covers."""
    kept = [(k, a, b) for k, (a, b) in enumerate(offsets) if context[k] and b > a]
    if not kept or char_start < kept[0][1] or char_end > kept[-1][2]:
        return None
    inside = [k for k, a, b in kept if a < char_end and b > char_start]
    return (inside[0], inside[-1]) if inside else None


def _answer_list(cell, row: int, example: str, where: str, field: str) -> list[tuple[str, int]]:
    """One ``answers`` cell as ``[(text, answer_start), …]``: Hugging Face's ``{"text": [...], "answer_start": [...]}``
    or SQuAD's list of ``{"text": ..., "answer_start": ...}``."""
    at = f"row {row + 1} (example {example!r})"
    if isinstance(cell, dict) and set(cell) >= {"text", "answer_start"}:
        texts, starts = list(np.atleast_1d(cell["text"])), list(np.atleast_1d(cell["answer_start"]))
        if len(texts) != len(starts):
            raise InputError(where, field, f"expected as many answer_start as text values, {at} has {len(starts)} "
                             f"and {len(texts)}")  # fmt: skip
        pairs = list(zip(texts, starts, strict=True))
    elif isinstance(cell, list | tuple | np.ndarray) and all(isinstance(a, dict) for a in cell):
        if not all(set(a) >= {"text", "answer_start"} for a in cell):
            raise InputError(where, field, f"expected each answer with 'text' and 'answer_start', {at} has "
                             f"{[sorted(a) for a in cell]}")  # fmt: skip
        pairs = [(a["text"], a["answer_start"]) for a in cell]
    else:
        raise InputError(where, field, f"expected {{'text': [...], 'answer_start': [...]}} or a list of "
                         f"{{'text', 'answer_start'}} answers, {at} has {cell!r}"[:400])  # fmt: skip
    if not pairs:
        raise InputError(where, field, f"expected at least one answer, {at} has none")
    out = []
    for text, start in pairs:
        if isinstance(start, bool) or not isinstance(start, int | np.integer):
            raise InputError(where, field, f"expected answer_start a character offset (an integer), {at} has "
                             f"{start!r}")  # fmt: skip
        if not isinstance(text, str) or not text.strip():
            raise InputError(where, field, f"expected an answer text that is not empty, {at} has {text!r}")
        out.append((text, int(start)))
    return out


def check_answers(questions: Sequence, contexts: Sequence[str], answers: Sequence, ids: Sequence[str], where: str,
                  field: str = "answers") -> list[list[tuple[str, int]]]:  # fmt: skip
    """Every example's gold answers as ``[(text, answer_start), …]``, checked: a question that is not empty, and
    each answer's text found in the context at its ``answer_start``. One :class:`InputError` naming the row and the
    field otherwise (``field``: the answers column; the question's is ``question``)."""
    out = []
    for row, (question, context, cell, example) in enumerate(zip(questions, contexts, answers, ids, strict=True)):
        if not isinstance(question, str) or not question.strip():
            raise InputError(where, "question", f"expected a question in every row, row {row + 1} (example "
                             f"{example!r}) has {question!r}")  # fmt: skip
        pairs = _answer_list(cell, row, str(example), where, field)
        for text, start in pairs:
            found = context[start : start + len(text)] if 0 <= start <= len(context) else None
            if found != text:
                raise InputError(where, field, f"expected each answer's text in the context at its answer_start, "
                                 f"row {row + 1} (example {example!r}): {text!r} at {start}, the context has "
                                 f"{found!r} there")  # fmt: skip
        out.append(pairs)
    return out
