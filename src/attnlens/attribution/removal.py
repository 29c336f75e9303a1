"""The removal curves: every ranking's deletion and insertion copies of a document through the classifier
(what :mod:`attnlens.attribution.ranking_faithfulness` scores).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.attribution.ranking_faithfulness import kept
from attnlens.classifier.prediction import Encoded
from attnlens.models import architecture
from attnlens.stats import n_top
from attnlens.tasks import task_of


@torch.no_grad()
def readouts(
    model,
    sequences: list[list[int]],
    pad_id: int,
    batch_size: int,
    targets: Sequence[int | None],
    global_tokens: list[list[int]] | None = None,
) -> np.ndarray:
    """``(len(sequences),)`` float64: each sequence's readout ``F`` (:meth:`attnlens.tasks.Task.outputs`: a class's
    softmax probability, a regression's value, an answer span's probability) at its own target, ``0`` where the
    target is ``None`` (removal took an answer span away whole); length-sorted batches, each sequence's global
    tokens as given (``None``: the architecture's own)."""
    encoded = Encoded([list(s) for s in sequences], pad_id, global_tokens)
    device = next(model.parameters()).device
    task = task_of(model.config)
    out = np.zeros(len(sequences))
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size].tolist()
        batch = encoded.batch(index, device, architecture(model))
        logits = task.logits(model(**batch)).double().cpu().numpy()
        if task.token_logits:  # a token's padding is no span's: -inf, as predict_logits leaves it
            logits = np.where(batch["attention_mask"].cpu().numpy()[:, None, :] > 0, logits, -np.inf)
        values = task.outputs(logits)
        for j, i in enumerate(index):
            out[i] = 0.0 if targets[i] is None else values[j, targets[i]]
    return out


def copies_probe(model, ids: Sequence[int]):
    """``probe(k)``: ``k`` copies of a document through the classifier in one batch — what an ``auto`` batch of
    removal or occlusion copies is measured with (:func:`attnlens.device.batch_size`)."""

    def probe(copies: int) -> None:
        readouts(model, [list(ids)] * copies, model.config.pad_token_id, copies, [None] * copies)

    return probe


def evaluate_example(
    model,
    ids: Sequence[int],
    special: np.ndarray,
    orders: dict[str, np.ndarray],
    target: int,
    fractions,
    batch_size,
    tokenizer=None,
) -> pd.DataFrame:
    """Deletion and insertion readouts ``F`` (probabilities of a classifier) of every ranking at every fraction
    (plus the end points), each at the explained target as the copy keeps it (:meth:`attnlens.tasks.Task.kept_target`:
    an answer span shifts with the tokens removed before it); ``tokenizer`` finds a copy's global tokens where the
    task chooses them (:meth:`~attnlens.tasks.Task.global_tokens`: a question's).

    Returns rows ``ranking, curve, fraction, n_tokens, prob`` with ``fraction`` 0 and 1 included
    (deletion at 0 = the full input, insertion at 0 = the special tokens only).
    """
    task = task_of(model.config)
    m = int((~special).sum())
    grid = sorted({0.0, *map(float, fractions), 1.0})
    jobs, seqs, targets, cache = [], [], [], {}
    for name, order in orders.items():
        for curve in ("deletion", "insertion"):
            for f in grid:
                count = n_top(f, m)
                keep = kept(order, special, count, curve)
                seq = [int(i) for i, k in zip(ids, keep, strict=True) if k]
                key = tuple(seq)
                if key not in cache:  # the end points are shared by every ranking
                    cache[key] = len(seqs)
                    seqs.append(seq)
                    targets.append(task.kept_target(target, keep))
                jobs.append((name, curve, f, count, cache[key]))
    chosen = [task.global_tokens(s, tokenizer) for s in seqs]
    probs = readouts(
        model, seqs, model.config.pad_token_id, batch_size, targets, None if all(c is None for c in chosen) else chosen
    )
    return pd.DataFrame(
        [(name, curve, f, count, float(probs[j])) for name, curve, f, count, j in jobs],
        columns=["ranking", "curve", "fraction", "n_tokens", "prob"],
    )
