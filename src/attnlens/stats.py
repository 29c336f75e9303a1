"""Small shared statistics: top-fraction counts, cosine, Pearson, a bootstrap, a permutation p-value, a paired test.

Every interval in the pipeline comes from :func:`bootstrap_means` and every permutation test's
p-value from :func:`permutation_p_value`, so a reader checks each recipe once.
"""

from __future__ import annotations

import math
import warnings

import numpy as np


def n_top(fraction: float, m: int) -> int:
    """How many ranked tokens a fraction covers: ``⌈f · m⌉`` (at least one when ``m > 0``)."""
    return min(m, math.ceil(fraction * m - 1e-9))


def cosine(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Cosine along the last axis (broadcast); NaN when either vector is zero."""
    num = np.einsum("...i,...i->...", u, v)
    den = np.sqrt(np.einsum("...i,...i->...", u, u)) * np.sqrt(np.einsum("...i,...i->...", v, v))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def pearson(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Pearson correlation along the last axis (broadcast); NaN for a constant vector."""
    return cosine(u - u.mean(-1, keepdims=True), v - v.mean(-1, keepdims=True))


def not_computable(n: int, why: str | None = None) -> str:
    """The reason a table gives instead of a number: ``not computable (n = 1)[: why]``."""
    return f"not computable (n = {n})" + (f": {why}" if why else "")


#: The fewest values a bootstrap interval is computed from (one value has no spread to resample).
MIN_BOOTSTRAP = 2


def bootstrap_means(values: np.ndarray, seed: int, n_boot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column means of ``(examples, groups)`` with percentile 95 % intervals (NaNs skipped).

    The examples are resampled once for all groups (a paired bootstrap): ``n_boot`` multinomial
    weight vectors times the matrix, so a thousand examples × hundreds of groups take a few
    matrix products. A column with fewer than :data:`MIN_BOOTSTRAP` values has no interval (NaN).
    """
    values = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid.any(0), np.nansum(values, 0) / valid.sum(0), np.nan)
        n = values.shape[0]
        if n == 0:
            nan = np.full(values.shape[1], np.nan)
            return mean, nan, nan
        weights = np.random.default_rng(seed).multinomial(n, np.full(n, 1 / n), size=n_boot).astype(np.float64)
        boot = (weights @ np.where(valid, values, 0.0)) / (weights @ valid)
    with warnings.catch_warnings():  # a column without values has no percentiles: NaN, said below
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0) if n_boot else (mean, mean)
    too_few = valid.sum(0) < MIN_BOOTSTRAP
    return mean, np.where(too_few, np.nan, lo), np.where(too_few, np.nan, hi)


def permutation_p_value(observed: float, null, atol: float = 0.0) -> float:
    """One-sided permutation p-value ``(1 + #{null ≥ observed − atol}) / (len(null) + 1)``.

    ``null`` holds the statistic on permuted data (NaNs already dropped); the ``+ 1`` counts the
    observed arrangement itself, so the p-value is never 0 (Phipson & Smyth, 2010). ``atol`` lets
    a permuted value equal to the observed one up to rounding count as "at least as large".
    """
    null = np.asarray(null, dtype=np.float64)
    return float((1 + np.sum(null >= observed - atol)) / (len(null) + 1))


def rank_correlation(x: np.ndarray, y: np.ndarray, n_permutations: int, seed: int) -> dict:
    """Spearman ρ of ``x`` and ``y`` with a two-sided permutation p-value (``y`` shuffled)."""
    from scipy.stats import rankdata  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    rx, ry = rankdata(x), rankdata(y)
    observed = float(pearson(rx, ry))
    rng = np.random.default_rng(seed)
    null = pearson(np.stack([rng.permutation(ry) for _ in range(n_permutations)]), rx) if n_permutations else None
    p = permutation_p_value(abs(observed), np.abs(null), atol=1e-12) if n_permutations else None
    return {"spearman": observed, "p_value": p, "n": len(x), "n_permutations": int(n_permutations)}


#: The fewest non-zero paired differences with which a two-sided exact Wilcoxon test can reach p < 0.05.
MIN_WILCOXON = 6


def paired_wilcoxon(x, y) -> tuple[int, float, float, float, str]:
    """(pairs, median of x − y, statistic, two-sided p, note) over the pairs where both are finite.

    Zero differences are dropped (Wilcoxon's convention); the exact null distribution is used up
    to 50 untied differences, the normal approximation otherwise (scipy's permutation fallback for
    small tied samples costs seconds per test). ``note`` says why there is no p-value, or that with
    fewer than :data:`MIN_WILCOXON` non-zero differences no p-value can fall below 0.05.
    """
    from scipy.stats import wilcoxon  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    d = x[ok] - y[ok]
    n = int(ok.sum())
    median = float(np.median(d)) if len(d) else float("nan")
    d = d[d != 0]
    if not n:
        return 0, median, float("nan"), float("nan"), not_computable(0, "no example has both values")
    if not len(d):
        return n, median, float("nan"), float("nan"), not_computable(n, "every paired difference is 0")
    exact = len(d) <= 50 and len(np.unique(np.abs(d))) == len(d)
    res = wilcoxon(d, method="exact" if exact else "approx")
    note = f"{len(d)} non-zero differences: p cannot fall below 0.05" if len(d) < MIN_WILCOXON else ""
    return n, median, float(res.statistic), float(res.pvalue), note


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm, 1979) of a family of tests, NaN left out of the family and kept:
    the ``i``-th smallest of ``m`` is ``max_{j ≤ i} min(1, (m − j + 1) · p_(j))``, so rejecting where the adjusted
    p-value is below ``α`` holds the chance of any false rejection in the family to ``α``."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out
