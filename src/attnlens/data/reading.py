"""What the model reads of each split: its token counts, the documents cut at ``model.max_length`` and the share
of unknown tokens, as numbers for the split manifest and as the run notes' sentences (a split, or one document).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from attnlens.data.tokens import structural_ids, unknown_count
from attnlens.tasks import CLASSIFICATION, Task

log = logging.getLogger(__name__)


def encode_splits(
    tokenizer, frames: dict[str, pd.DataFrame], task: Task = CLASSIFICATION
) -> dict[str, list[list[int]]]:
    """Ids of every example as its task reads it (:meth:`~attnlens.tasks.Task.texts`: a document; a question and its
    context), special tokens included, nothing cut; per split, in frame order."""
    out = {}
    for split, df in frames.items():
        first, second = task.texts(df) if len(df) else ([], None)
        pair = () if second is None else (second,)
        out[split] = tokenizer(first, *pair, truncation=False, verbose=False)["input_ids"] if len(df) else []
    return out


def token_counts(ids: dict[str, list[list[int]]]) -> dict[str, np.ndarray]:
    """Tokens of every document (special tokens included, nothing cut), per split, in frame order."""
    return {split: np.array([len(r) for r in rows], dtype=np.int64) for split, rows in ids.items()}


#: Above this share of ``[UNK]`` among a split's content tokens, the run notes warn: the model reads a
#: sizeable part of the text as one unknown token (Chinese is 76 % ``[UNK]`` for the packaged MiniLM).
UNKNOWN_WARN_SHARE = 0.01


def unknown_tokens(tokenizer, ids: dict[str, list[list[int]]], max_length: int) -> dict[str, dict]:
    """Per split, the ``[UNK]`` tokens among the content tokens the model sees.

    ``ids``: :func:`encode_splits`. Truncation keeps the first ``max_length`` minus the framing tokens of a
    document's content, so that is what is counted.
    """
    structural = structural_ids(tokenizer)
    budget = max_length - len(tokenizer("")["input_ids"])
    out = {}
    for split, rows in ids.items():
        content = [[i for i in r if i not in structural][:budget] for r in rows]
        n_unk, n_content = unknown_count(tokenizer, content)
        out[split] = {"unknown": n_unk, "content": n_content, "share": n_unk / n_content if n_content else 0.0}
    return out


def unknown_note(split: str, summary: dict, unk_token: str | None) -> str:
    """The run note on a split's unknown tokens; it starts with ``warning:`` above :data:`UNKNOWN_WARN_SHARE`."""
    if unk_token is None:
        return f"{split}: the tokenizer has no unknown token; every character of the text is spelled"
    line = (
        f"{split}: {summary['unknown']} of {summary['content']} content tokens are {unk_token} "
        f"({summary['share']:.2%}); they are attributed and ranked as text"
    )
    if summary["share"] > UNKNOWN_WARN_SHARE:
        line = (
            f"warning: {line}; above {UNKNOWN_WARN_SHARE:.0%} the vocabulary cannot spell much of this text "
            "(another script or emoji?), so explanations of those tokens say little"
        )
    return line


def truncation(manifest: dict, counts: dict[str, np.ndarray], max_length: int) -> dict:
    """Add to the split manifest what cutting at ``max_length`` keeps: ``tokens`` and ``kept`` per example,
    and per split the number of documents cut and the tokens kept of all. Returns the per-split summary."""
    per_split = {}
    for split, n in counts.items():
        entries = [e for e in manifest["examples"] if e["split"] == split]  # in frame order, like ``counts``
        for entry, tokens in zip(entries, n.tolist(), strict=True):
            entry["tokens"], entry["kept"] = tokens, min(tokens, max_length)
        kept = np.minimum(n, max_length)
        per_split[split] = {
            "documents": len(n),
            "truncated": int((n > max_length).sum()),
            "tokens": int(n.sum()),
            "tokens_kept": int(kept.sum()),
            "longest": int(n.max()) if len(n) else 0,
        }
    manifest["max_length"] = int(max_length)
    manifest["truncation"] = per_split
    return per_split


def truncation_note(split: str, summary: dict, max_length: int) -> str | None:
    """One line on what cutting at ``max_length`` did to a split, or ``None`` when nothing was cut."""
    if not summary["truncated"]:
        return None
    share = summary["tokens_kept"] / summary["tokens"] if summary["tokens"] else 1.0
    return (
        f"{split}: {summary['truncated']} of {summary['documents']} documents are longer than max_length "
        f"{max_length} and were cut (longest {summary['longest']} tokens); {summary['tokens_kept']} of "
        f"{summary['tokens']} tokens kept ({share:.0%})"
    )


def document_reading(
    tokenizer,
    text: str,
    max_length: int,
    name: str = "document",
    task: Task = CLASSIFICATION,
    question: str | None = None,
) -> tuple[dict, list[str]]:
    """What the model reads of one document, as the pipeline reports it for a split (:func:`truncation`,
    :func:`unknown_tokens`): its ``tokens``, the tokens ``kept`` at ``max_length``, whether it was ``truncated``,
    its ``unknown`` tokens among ``content`` ones and their ``unknown_share``; and the run notes' lines that a
    reader must see — the cut (:func:`truncation_note`), and the unknown tokens' warning above
    :data:`UNKNOWN_WARN_SHARE` (:func:`unknown_note`). A question-answering document is read with its ``question``
    (``task``'s texts)."""
    extra = {"question": [question]} if question is not None else {}
    ids = encode_splits(tokenizer, {name: pd.DataFrame({"text": [text], **extra})}, task)
    manifest: dict[str, Any] = {"examples": [{"split": name}]}
    cut = truncation(manifest, token_counts(ids), max_length)[name]
    unknown = unknown_tokens(tokenizer, ids, max_length)[name]
    cut_note, unknown_line = truncation_note(name, cut, max_length), unknown_note(name, unknown, tokenizer.unk_token)
    notes = ([cut_note] if cut_note else []) + ([unknown_line] if unknown_line.startswith("warning:") else [])
    entry = manifest["examples"][0]
    reading = {
        "tokens": entry["tokens"],
        "kept": entry["kept"],
        "truncated": bool(cut["truncated"]),
        "unknown": unknown["unknown"],
        "content": unknown["content"],
        "unknown_share": unknown["share"],
    }
    return reading, notes
