"""Which method tells what a generated answer rests on: every answer method judged on the same answers, as
ContextCite judges its own, and against the planted truth.

Per answer and method, four groups of numbers (long rows of :data:`~attnlens.attribution.leaderboard.EXAMPLE_COLUMNS`):

* **ablation** — the top-``k`` drop, the fall of the answer's score ``F`` when the method's ``k`` highest-scored
  sources are removed (``F(context) − F(context without them)``; larger is better), for each ``k``; and the linear
  datamodeling score, Spearman's ρ between the scores the method's linear model predicts on held-out random
  ablations and the actual ones (:func:`~attnlens.attribution.datamodels.linear_datamodeling_score`);
* **exact truth** — where every one of the answer's ``2ⁿ`` ablations is scored (``generation.exact_sources``):
  the top-``k`` drop as a share of the best any ``k`` sources give, the linear datamodeling score over every
  ablation, and Kendall's τ-b with the exact Shapley values (:mod:`attnlens.attribution.exact`), whose own rows
  (``exact_shapley``, ``exact_banzhaf``) are judged beside the methods;
* **plausibility** — precision and recall at ``k`` against the planted sources (the answer's sentence, and the
  supporting sentence of a question that takes two hops), beside their ceiling (row :data:`CEILING`): with ``r``
  planted sources no ranking's precision at ``k`` exceeds ``min(r, k) / k``, nor its recall ``min(r, k) / r``;
* **cost** — seconds, forwards and backwards of the answer, seconds over one plain forward, peak memory.

The summary is :func:`attnlens.attribution.leaderboard.summarise`'s: per method and metric, the mean with a paired
bootstrap 95 % interval and a paired Wilcoxon test against a baseline method.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlens.attribution.datamodels import linear_datamodeling_score, precision_recall_at_k, top_k_masks
from attnlens.attribution.exact import best_drops, every_mask, exact_values
from attnlens.attribution.leaderboard import Metric, summarise

ANSWER_LEADERBOARD_SCHEMA = "answer_leaderboard/v1"
#: The method the others' linear datamodeling scores are measured against (ContextCite's surrogate).
SURROGATE = "surrogate"
#: The row of the best precision and recall at ``k`` any ranking can reach against the planted sources.
CEILING = "planted_ceiling"
#: The exact values judged beside the methods where every ablation is scored: row name → :class:`ExactValues` field.
EXACT = {"exact_shapley": "shapley", "exact_banzhaf": "banzhaf"}
#: The leaderboard's rows that are references, not methods: what the methods are measured against, never a finding.
REFERENCES = frozenset({*EXACT, CEILING})


def answer_metrics(ks: Sequence[int]) -> list[Metric]:
    """Every column of the answers' leaderboard, in order."""
    return [
        *[Metric(f"top{k}_drop", "ablation", f"drop in F without the top {k}", True) for k in ks],
        Metric("lds", "ablation", "linear datamodeling score (Spearman ρ)", True),
        Metric("lds_all", "ablation", "LDS over every ablation (exact)", True),
        *[Metric(f"top{k}_share", "ablation", f"top-{k} drop / best achievable (exact)", True) for k in ks],
        Metric("shapley_tau", "ablation", "Kendall τ-b with exact Shapley", True),
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
    masks, ``planted`` flags the planted sources (precision and recall are NaN where the answer has none; where it
    has some, the :data:`CEILING` row holds the best any ranking reaches)."""
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
    if planted.any():  # after the methods: the leaderboard lists its rows in their first answer's order
        n = int(np.count_nonzero(planted))
        for k in ks:
            rows.append((example_id, CEILING, f"precision_at_{k}", min(n, k) / k, np.nan))
            rows.append((example_id, CEILING, f"recall_at_{k}", min(n, k) / n, np.nan))
    return rows


def exact_table(masks: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``F`` on every mask of ``masks`` (all ``2ⁿ``, in any order) as a table in
    :func:`~attnlens.attribution.exact.every_mask`'s order, indexed by the mask's bits."""
    masks = np.asarray(masks, dtype=bool)
    n = masks.shape[1]
    index = masks @ (1 << np.arange(n))
    if len(masks) != 2**n or len(np.unique(index)) != 2**n:
        raise ValueError(f"expected every one of the 2^{n} masks once, got {len(masks)} masks")
    table = np.empty(2**n)
    table[index] = scores
    return table


def looked_up(table: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """``F`` on ``masks`` read from the exact ``table`` (no forward)."""
    masks = np.asarray(masks, dtype=bool)
    return table[masks @ (1 << np.arange(masks.shape[1]))]


def exact_scores(table: np.ndarray) -> dict[str, np.ndarray]:
    """The exact values judged beside the methods (:data:`EXACT`), per source."""
    values = exact_values(table)
    return {name: getattr(values, field) for name, field in EXACT.items()}


def judge_exact(
    example_id: str,
    scores: dict[str, np.ndarray],
    ks: Sequence[int],
    table: np.ndarray,
    removed_scores: np.ndarray,
    where: dict[str, list[int]],
    shapley: np.ndarray,
) -> list[tuple]:
    """The exact-truth rows of one answer whose every ablation was scored (``table``, ``F`` on
    :func:`~attnlens.attribution.exact.every_mask`): each method's top-``k`` drop as a share of the best
    achievable (NaN where no ``k`` sources lower ``F``), its LDS over every ablation, and Kendall's τ-b of its
    scores with the exact ``shapley`` values (0 for a method that scores every source alike; NaN where the Shapley
    values are all alike, nothing to agree with)."""
    from scipy.stats import kendalltau  # noqa: PLC0415 (scipy.stats: 1 s to import; the judging jobs only)

    best = best_drops(table, ks)
    masks = every_mask(int(np.log2(len(table))))
    rows = []
    for method, s in scores.items():
        filled = np.nan_to_num(s, nan=0.0)
        for k, row, b in zip(ks, where[method], best, strict=True):
            share = (table[-1] - float(removed_scores[row])) / b if b > 0 else np.nan
            rows.append((example_id, method, f"top{k}_share", share, np.nan))
        rows.append((example_id, method, "lds_all", linear_datamodeling_score(filled, masks, table), np.nan))
        if np.ptp(shapley) == 0:
            tau = np.nan
        elif np.ptp(filled) == 0:
            tau = 0.0
        else:
            tau = float(kendalltau(filled, shapley).statistic)
        rows.append((example_id, method, "shapley_tau", tau, np.nan))
    return rows


def structure_leaderboards(
    judged: pd.DataFrame, responses: pd.DataFrame, columns, baseline: str, seed: int, n_bootstrap: int
) -> pd.DataFrame:
    """The leaderboard's summary (:func:`~attnlens.attribution.leaderboard.summarise`, against ``baseline``) of each
    planted structure's answers, each its own family of tests (a ``structure`` column first; none where the contexts
    have no structure)."""
    structure = dict(zip(responses["example_id"], responses["structure"], strict=True))
    parts = []
    for name in sorted({s for s in structure.values() if s}):
        mine = judged[judged["example_id"].map(structure) == name]
        part = summarise(mine, columns, baseline, seed, n_bootstrap, REFERENCES)
        parts.append(part.assign(n_answers=mine["example_id"].nunique()))
        parts[-1].insert(0, "structure", name)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["structure", "n_answers"])


def structure_answers(responses: pd.DataFrame) -> pd.DataFrame:
    """Per planted structure (and all answers): how many, the share right, the share that follow the context, the
    share equal to the model's answer without the context."""
    frames = [("all", responses)] + [(s, g) for s, g in responses.groupby("structure", sort=True) if s]
    return pd.DataFrame(
        [
            {
                "structure": name,
                "answers": len(g),
                "right": g["exact_match"].mean(),
                "follows_context": g["follows_context"].mean(),
                "same_as_closed_book": g["same_as_closed_book"].mean(),
            }
            for name, g in frames
        ]
    )
