"""Which method tells what a generated answer rests on: every answer method judged on the same answers, as
ContextCite judges its own, and against the planted truth.

Per answer and method, four groups of numbers (long rows of :data:`~attnlens.attribution.leaderboard.EXAMPLE_COLUMNS`):

* **ablation** — the top-``k`` drop, the fall of the answer's score ``F`` when the method's ``k`` highest-scored
  sources are removed (``F(context) − F(context without them)``; larger is better), for each ``k``; and the linear
  datamodeling score, Spearman's ρ between the scores the method's linear model predicts on held-out random
  ablations and the actual ones (:func:`~attnlens.attribution.datamodels.linear_datamodeling_score`);
* **plausibility** — precision and recall at ``k`` against the planted sources (the answer's sentence, and the
  supporting sentence of a question that takes two hops);
* **cost** — seconds, forwards and backwards of the answer, seconds over one plain forward, peak memory.

The summary is :func:`attnlens.attribution.leaderboard.summarise`'s: per method and metric, the mean with a paired
bootstrap 95 % interval and a paired Wilcoxon test against a baseline method.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from attnlens.attribution.datamodels import linear_datamodeling_score, precision_recall_at_k, top_k_masks
from attnlens.attribution.leaderboard import Metric

ANSWER_LEADERBOARD_SCHEMA = "answer_leaderboard/v1"
#: The method the others' linear datamodeling scores are measured against (ContextCite's surrogate).
SURROGATE = "surrogate"


def answer_metrics(ks: Sequence[int]) -> list[Metric]:
    """Every column of the answers' leaderboard, in order."""
    return [
        *[Metric(f"top{k}_drop", "ablation", f"drop in F without the top {k}", True) for k in ks],
        Metric("lds", "ablation", "linear datamodeling score (Spearman ρ)", True),
        *[Metric(f"precision_at_{k}", "plausibility", f"precision at {k} (planted sources)", True) for k in ks],
        *[Metric(f"recall_at_{k}", "plausibility", f"recall at {k} (planted sources)", True) for k in ks],
        Metric("seconds", "cost", "seconds per answer", None),
        Metric("cost_ratio", "cost", "cost / one forward pass", None),
        Metric("forwards", "cost", "forwards per answer", None),
        Metric("backwards", "cost", "backwards per answer", None),
        Metric("peak_mib", "cost", "peak memory (MiB)", None),
    ]


def answer_direction(name: str) -> bool | None:
    """Whether a larger value of the answers' leaderboard column ``name`` is better; None for the cost columns,
    which are reported, not ranked."""
    k = re.search(r"\d+", name)
    for metric in answer_metrics((int(k.group()),) if k else ()):
        if metric.name == name:
            return metric.higher_is_better
    raise KeyError(f"no column {name!r} in the answers' leaderboard")


def removal_masks(scores: dict[str, np.ndarray], ks: Sequence[int]) -> tuple[np.ndarray, dict[str, list[int]]]:
    """The distinct masks that remove each method's top ``k`` sources for every ``k`` (methods that agree share
    their forwards), and for each method the row of each ``k``'s mask, in ``ks``' order."""
    distinct: dict[bytes, int] = {}
    rows: list[np.ndarray] = []
    where: dict[str, list[int]] = {}
    for method, s in scores.items():
        where[method] = []
        for mask in top_k_masks(np.nan_to_num(s, nan=-np.inf), tuple(ks)):
            key = mask.tobytes()
            if key not in distinct:
                distinct[key] = len(rows)
                rows.append(mask)
            where[method].append(distinct[key])
    n_sources = len(next(iter(scores.values()))) if scores else 0
    return (np.stack(rows) if rows else np.zeros((0, n_sources), dtype=bool)), where


def judge_answer(
    example_id: str,
    scores: dict[str, np.ndarray],
    ks: Sequence[int],
    full_score: float,
    removed_scores: np.ndarray,
    where: dict[str, list[int]],
    heldout_masks: np.ndarray,
    heldout_scores: np.ndarray,
    planted: np.ndarray,
) -> list[tuple]:
    """The ablation and plausibility rows of one answer: ``removed_scores`` are ``F`` on :func:`removal_masks`'
    masks, ``planted`` flags the planted sources (precision and recall are NaN where the answer has none)."""
    rows = []
    for method, s in scores.items():
        for k, row in zip(ks, where[method], strict=True):
            rows.append((example_id, method, f"top{k}_drop", full_score - float(removed_scores[row]), np.nan))
        filled = np.nan_to_num(s, nan=0.0)
        rows.append(
            (example_id, method, "lds", linear_datamodeling_score(filled, heldout_masks, heldout_scores), np.nan)
        )
        for k in ks:
            if planted.any():
                p, r = precision_recall_at_k(np.nan_to_num(s, nan=-np.inf), planted, k)
            else:
                p = r = np.nan
            rows.append((example_id, method, f"precision_at_{k}", p, np.nan))
            rows.append((example_id, method, f"recall_at_{k}", r, np.nan))
    return rows
