"""The removal curves: every ranking's deletion and insertion copies of a document through the classifier
(what :mod:`attnlens.attribution.faithfulness` scores).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.attribution.faithfulness import perturb
from attnlens.models import architecture
from attnlens.prediction import Encoded
from attnlens.stats import n_top
from attnlens.tasks import task_of


@torch.no_grad()
def readouts(model, sequences: list[list[int]], pad_id: int, batch_size: int) -> np.ndarray:
    """``(len(sequences), n_outputs)`` of the task's readout ``F`` in float64 (:meth:`attnlens.tasks.Task.outputs`:
    the softmax probabilities of a classifier, the value of a regression), length-sorted batches, CLS global."""
    encoded = Encoded([list(s) for s in sequences], pad_id)
    device = next(model.parameters()).device
    task = task_of(model.config)
    out = np.zeros((len(sequences), model.config.num_labels))
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size].tolist()
        logits = model(**encoded.batch(index, device, architecture(model))).logits.double().cpu().numpy()
        out[index] = task.outputs(logits)
    return out


def evaluate_example(
    model, ids: Sequence[int], special: np.ndarray, orders: dict[str, np.ndarray], target: int, fractions, batch_size
) -> pd.DataFrame:
    """Deletion and insertion readouts ``F`` (probabilities of a classifier) of every ranking at every fraction
    (plus the end points).

    Returns rows ``ranking, curve, fraction, n_tokens, prob`` with ``fraction`` 0 and 1 included
    (deletion at 0 = the full input, insertion at 0 = the special tokens only).
    """
    m = int((~special).sum())
    grid = sorted({0.0, *map(float, fractions), 1.0})
    jobs, seqs, cache = [], [], {}
    for name, order in orders.items():
        for curve in ("deletion", "insertion"):
            for f in grid:
                count = n_top(f, m)
                seq = perturb(ids, order, special, count, curve)
                key = tuple(seq)
                if key not in cache:  # the end points are shared by every ranking
                    cache[key] = len(seqs)
                    seqs.append(seq)
                jobs.append((name, curve, f, count, cache[key]))
    probs = readouts(model, seqs, model.config.pad_token_id, batch_size)[:, target]
    return pd.DataFrame(
        [(name, curve, f, count, float(probs[j])) for name, curve, f, count, j in jobs],
        columns=["ranking", "curve", "fraction", "n_tokens", "prob"],
    )
