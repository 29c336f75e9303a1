"""Faithfulness and plausibility of token rankings (IG, attention, random), on token ids.

For a ranking of an example's non-special tokens (most important first) and a fraction ``f``:

* **deletion** removes the top ``⌈f · m⌉`` of the ``m`` ranked tokens from the id sequence (special
  tokens stay; the rest keeps its order and is renumbered by the model as a shorter input);
* **insertion** keeps only those tokens (plus the special ones) — the input grows from nothing.

Perturbations are made on the token ids and never decoded and re-tokenised, so a word piece stays
the piece that was scored. With ``p`` the probability of the explained class (the IG target),
**comprehensiveness** at ``f`` is ``p(x) − p(x without the top f)`` and **sufficiency** is
``p(x) − p(only the top f)`` (DeYoung et al., 2020, ERASER); AOPC averages each over the fractions.
A good ranking has high comprehensiveness and low sufficiency; the random ranking is the control.

Plausibility compares a ranking with the evidence phrases planted in the synthetic corpus
(``rationales.parquet``): a token is evidence when its character span overlaps an evidence phrase.
We report the token-level average precision (AUPRC) of the scores and precision / recall / F1 of the
top ``k`` tokens.

The masked copies go through the classifier in :mod:`attnlens.attribution.removal`; this module is what the
curves are read and scored with, and loads no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnlens.sharding import example_rng

if TYPE_CHECKING:  # light: the curves' rules import this module without torch
    from attnlens.classifier.prediction import Encoded

FAITHFULNESS_SCHEMA = "faithfulness/v1"
PLAUSIBILITY_SCHEMA = "plausibility/v1"


def ranking(scores: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Eligible positions ordered by descending score, ties by position."""
    pos = np.flatnonzero(eligible)
    return pos[np.lexsort((pos, -np.asarray(scores, dtype=np.float64)[pos]))]


def random_ranking(eligible: np.ndarray, seed: int, example_id: str) -> np.ndarray:
    """A seeded permutation of the eligible positions, stable per example id."""
    return example_rng(seed, example_id).permutation(np.flatnonzero(eligible))


def kept(order: np.ndarray, special: np.ndarray, count: int, kind: str) -> np.ndarray:
    """``(n,)`` bool, the tokens a copy keeps: ``deletion``, all but the first ``count`` of ``order``;
    ``insertion``, the specials and those only."""
    chosen = np.zeros(len(special), dtype=bool)
    chosen[order[:count]] = True
    return ~chosen if kind == "deletion" else (chosen | special)


def perturb(ids: Sequence[int], order: np.ndarray, special: np.ndarray, count: int, kind: str) -> list[int]:
    """``deletion``: ids without the first ``count`` of ``order``; ``insertion``: specials + those only."""
    keep = kept(order, np.asarray(special, dtype=bool), count, kind)
    return [int(i) for i, k in zip(ids, keep, strict=True) if k]


def aopc(curves: pd.DataFrame, fractions) -> pd.DataFrame:
    """Per example and ranking: comprehensiveness and sufficiency AOPC over ``fractions``."""
    fr = set(map(float, fractions))
    full = curves[(curves["curve"] == "deletion") & (curves["fraction"] == 0.0)]
    full = full.groupby(["example_id", "ranking"])["prob"].first().rename("p_full")
    part = curves[curves["fraction"].isin(fr)].join(full, on=["example_id", "ranking"])
    part["drop"] = part["p_full"] - part["prob"]
    table = part.pivot_table(index=["example_id", "ranking"], columns="curve", values="drop", aggfunc="mean")
    table = table.rename(columns={"deletion": "comprehensiveness", "insertion": "sufficiency"})
    return table.reset_index()


def evidence_labels(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """``(n,)`` bool: the token's character span overlaps an evidence span (special tokens (0, 0): no)."""
    out = np.zeros(len(offsets), dtype=bool)
    for i, (a, b) in enumerate(offsets):
        if b > a:
            out[i] = any(a < e and s < b for s, e in spans)
    return out


def example_evidence(encoded: Encoded, index: int, input_ids: Sequence[int], spans, example_id: str = "") -> np.ndarray:
    """``(n,)`` bool: the tokens of example ``index`` of ``encoded``
    (:func:`attnlens.classifier.prediction.encode_examples`) that
    overlap a planted evidence span (character offsets of its ``text``), checked to be the ``input_ids`` explained."""
    if encoded.input_ids[index] != [int(i) for i in input_ids]:
        raise ValueError(f"{example_id}: re-encoding the text for character offsets gave different token ids")
    return evidence_labels(encoded.offsets[index], spans)


def plausibility(scores: np.ndarray, labels: np.ndarray, eligible: np.ndarray, k: int) -> dict[str, float]:
    """Token-level AUPRC of ``scores`` and precision / recall / F1 of the top ``k`` eligible tokens."""
    y = labels[eligible]
    s = np.asarray(scores, dtype=np.float64)[eligible]
    if not y.any():
        return {"auprc": float("nan"), "precision": float("nan"), "recall": float("nan"), "f1": float("nan")}
    from sklearn.metrics import average_precision_score  # noqa: PLC0415 (1.7 s to import: this function only)

    top = ranking(scores, eligible)[:k]
    hits = int(labels[top].sum())
    precision, recall = hits / max(len(top), 1), hits / int(y.sum())
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"auprc": float(average_precision_score(y, s)), "precision": precision, "recall": recall, "f1": f1}
