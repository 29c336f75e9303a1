"""The vectorised measures every comparison is built of, each on the rows of its first argument against one vector (or
matching rows): min-max scaling, thresholds, the legacy ranks, overlap curves, average overlap and RBO, Kendall's
tau-b, top sets and their Jaccard index. Each is checked against scipy or the rbo package in the tests.
"""

from __future__ import annotations

import numpy as np

from attnlens.attention.kernels import concordance_kernel


def minmax(v: np.ndarray) -> np.ndarray:
    """``(v − min v) / (max v − min v)`` along the last axis (NaN for a constant vector, as numpy gives)."""
    lo = v.min(-1, keepdims=True)
    hi = v.max(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (v - lo) / (hi - lo)


def zero_below(v: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """Entries below their row's threshold set to 0 (the notebooks' ``x[x < thr] = 0``)."""
    return np.where(v < np.asarray(threshold)[..., None], 0.0, v)


def inverse_permutation(order: np.ndarray) -> np.ndarray:
    """Row-wise ``rank[order[i]] = i``: the position of every item in its row's order."""
    order = np.atleast_2d(order)
    rank = np.empty_like(order)
    rows = np.arange(order.shape[0])[:, None]
    rank[rows, order] = np.arange(order.shape[1])[None, :]
    return rank


def legacy_ranks(v: np.ndarray, sort: str = "stable") -> np.ndarray:
    """Descending tie-broken ranks of the newer notebooks: ``order = argsort(v)[::-1]``, ``rank = argsort(order)``.

    0 is the largest. ``sort="numpy"`` is the original's ``np.argsort`` default (introsort, SIMD where
    the CPU has it): its order of tied values — all the zero-filled masked entries — differs between
    machines and numpy versions (B-8). ``"stable"`` (the default) gives the same numbers everywhere:
    the stable ascending order reversed lists tied values in *reverse* position order (the later
    position ranks higher). Tied positions then get the same relative order in both vectors, which
    makes the masking artefact (B-5) somewhat larger than with numpy's order.
    """
    kind = "stable" if sort == "stable" else None
    order = np.argsort(np.atleast_2d(v), axis=-1, kind=kind)[:, ::-1]
    return inverse_permutation(order)


def descending_positions(v: np.ndarray) -> np.ndarray:
    """Position of every item in the stable descending order of its row (ties: earlier item first)."""
    return inverse_permutation(np.argsort(-np.atleast_2d(v), axis=-1, kind="stable"))


def overlap_curve(rank_s: np.ndarray, rank_t: np.ndarray) -> np.ndarray:
    """``X[:, d − 1] = |S_{1:d} ∩ T_{1:d}|`` for rankings given as positions (rows of ``rank_s`` vs ``rank_t``).

    An item is in both prefixes from depth ``max(rank_s, rank_t) + 1`` on, so ``X`` is the cumulative
    histogram of that maximum.
    """
    m = np.maximum(np.atleast_2d(rank_s), np.atleast_2d(rank_t))
    rows, n = m.shape
    counts = np.bincount((m + n * np.arange(rows)[:, None]).ravel(), minlength=rows * n)
    return counts.reshape(rows, n).cumsum(1)


def average_overlap(x: np.ndarray, depth: int | None = None) -> np.ndarray:
    """``(1/D) Σ_{d ≤ D} X_d / d`` — the ``rbo`` package at ``p = 1`` (B-6)."""
    depth = x.shape[1] if depth is None else min(depth, x.shape[1])
    d = np.arange(1, depth + 1)
    return (x[:, :depth] / d).mean(1)


def rbo_ext(x: np.ndarray, p: float) -> np.ndarray:
    """Extrapolated rank-biased overlap of conjoint rankings of equal length (Webber et al. 2010, eq. 32).

    ``(1 − p) Σ_{d ≤ n} p^{d−1} X_d / d + (X_n / n) p^n`` — ``rbo.RankingSimilarity(S, T).rbo_ext(p)``.
    """
    n = x.shape[1]
    d = np.arange(1, n + 1)
    agreement = x / d
    return (1 - p) * agreement @ (p ** (d - 1.0)) + agreement[:, -1] * p**n


def kendall_tau_b(x: np.ndarray, y_dense: np.ndarray) -> np.ndarray:
    """Kendall's τ-b of ``x`` against every row of ``y_dense`` (dense integer ranks ``0…n−1``), O(n log n) each.

    Equals ``scipy.stats.kendalltau(x, y)`` (variant ``b``); NaN when either side is constant.
    """
    x = np.asarray(x)
    y_dense = np.ascontiguousarray(np.atleast_2d(y_dense), dtype=np.int64)
    n = x.shape[0]
    order = np.argsort(x, kind="stable").astype(np.int64)
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], n]
    group_end = np.zeros(n, dtype=np.int64)
    group_end[starts] = ends
    runs = ends - starts
    ties_x = int((runs * (runs - 1) // 2).sum())
    s = np.empty(y_dense.shape[0], dtype=np.int64)
    ties_y = np.empty(y_dense.shape[0], dtype=np.int64)
    concordance_kernel(order, group_end, y_dense, s, ties_y)
    n0 = n * (n - 1) // 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return s / np.sqrt((n0 - ties_x) * (n0 - ties_y).astype(np.float64))


def dense_ranks(v: np.ndarray) -> np.ndarray:
    """``0 … m−1`` for the ``m`` distinct values of ``v`` (ties share a rank)."""
    return np.unique(v, return_inverse=True)[1].astype(np.int64).reshape(-1)


def legacy_top_set(v: np.ndarray) -> np.ndarray:
    """``{i : v_i ≥ pct95(v), v_i ≠ 0}`` per row (``np.percentile`` with linear interpolation)."""
    threshold = np.percentile(v, 95, axis=-1)
    return (v >= threshold[..., None]) & (v != 0)


def jaccard_sets(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Jaccard index of boolean membership rows (NaN when both are empty)."""
    inter = (s & t).sum(-1)
    union = s.sum(-1) + t.sum(-1) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / union
