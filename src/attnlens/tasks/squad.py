"""SQuAD's answers and metrics (Rajpurkar et al., 2016, the official v1.1 evaluation script's definitions): exact
match and token F1 of the answer text after :func:`normalize_answer`, the best over the gold answers; an
``answers`` cell read in either of SQuAD's forms (or as JSON text, a CSV's cell) and checked against its context.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

from attnlens.errors import InputError

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


ANSWERS_AS_JSON = '{"text": ["..."], "answer_start": [0]} or [{"text": "...", "answer_start": 0}]'


def answer_list(cell, row: int, example: str, where: str, field: str) -> list[tuple[str, int]]:
    """One ``answers`` cell as ``[(text, answer_start), …]``: Hugging Face's ``{"text": [...], "answer_start": [...]}``
    or SQuAD's list of ``{"text": ..., "answer_start": ...}``, or either written as JSON text (a CSV's cell)."""
    at = f"row {row + 1} (example {example!r})"
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except ValueError:
            raise InputError(
                where,
                field,
                f"expected the answers as JSON text in a CSV cell ({ANSWERS_AS_JSON}), {at} has {cell!r}"[:400],
            ) from None
    if isinstance(cell, dict) and set(cell) >= {"text", "answer_start"}:
        texts, starts = (
            [v.item() if isinstance(v, np.generic) else v for v in np.atleast_1d(cell[key])]
            for key in ("text", "answer_start")
        )
        if len(texts) != len(starts):
            raise InputError(
                where, field, f"expected as many answer_start as text values, {at} has {len(starts)} and {len(texts)}"
            )
        pairs = list(zip(texts, starts, strict=True))
    elif isinstance(cell, list | tuple | np.ndarray) and all(isinstance(a, dict) for a in cell):
        if not all(set(a) >= {"text", "answer_start"} for a in cell):
            raise InputError(
                where,
                field,
                f"expected each answer with 'text' and 'answer_start', {at} has {[sorted(a) for a in cell]}",
            )
        pairs = [(a["text"], a["answer_start"]) for a in cell]
    else:
        raise InputError(
            where, field, f"expected {ANSWERS_AS_JSON} (as JSON text in a CSV cell), {at} has {cell!r}"[:400]
        )
    if not pairs:
        raise InputError(where, field, f"expected at least one answer, {at} has none")
    out = []
    for text, start in pairs:
        if isinstance(start, bool) or not isinstance(start, int | np.integer):
            raise InputError(where, field, f"expected answer_start a character offset (an integer), {at} has {start!r}")
        if not isinstance(text, str) or not text.strip():
            raise InputError(where, field, f"expected an answer text that is not empty, {at} has {text!r}")
        out.append((text, int(start)))
    return out


def check_answers(
    questions: Sequence,
    contexts: Sequence[str],
    answers: Sequence,
    ids: Sequence[str],
    where: str,
    field: str = "answers",
) -> list[list[tuple[str, int]]]:
    """Every example's gold answers as ``[(text, answer_start), …]``, checked: a question that is not empty, and
    each answer's text found in the context at its ``answer_start``. One :class:`InputError` naming the row and the
    field otherwise (``field``: the answers column; the question's is ``question``)."""
    out = []
    for row, (question, context, cell, example) in enumerate(zip(questions, contexts, answers, ids, strict=True)):
        if not isinstance(question, str) or not question.strip():
            raise InputError(
                where,
                "question",
                f"expected a question in every row, row {row + 1} (example {example!r}) has {question!r}",
            )
        pairs = answer_list(cell, row, str(example), where, field)
        for text, start in pairs:
            found = context[start : start + len(text)] if 0 <= start <= len(context) else None
            if found != text:
                raise InputError(
                    where,
                    field,
                    f"expected each answer's text in the context at its answer_start, "
                    f"row {row + 1} (example {example!r}): {text!r} at {start}, the context has "
                    f"{found!r} there",
                )
        out.append(pairs)
    return out
