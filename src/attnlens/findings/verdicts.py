"""Statistics across runs: agreement of rankings (Kendall's W) and the sign test of a statement.

A grid gives one value of every headline quantity per run (:mod:`attnlens.findings.statements`). Whether an
ordinal conclusion of one run — "method A is more faithful than B", "masking raises agreement" — survives the
grid is a count: in how many runs it holds. The count is tested with the two-sided sign test (the exact binomial
test of ``k`` successes in ``n`` untied runs against ``p = 1/2``; :func:`scipy.stats.binomtest`), and a
statement's verdict (:func:`verdict`) needs both a share of runs and a significant test. With few runs the test
cannot reach ``alpha`` even when every run agrees; the verdict then says so and how many runs would be needed
(:func:`runs_needed`), instead of calling the statement unstable.
"""

from __future__ import annotations

import math

import numpy as np

#: The verdicts of a statement across runs.
HOLDS, NOT_STABLE, TOO_FEW = "holds", "not stable", "too few runs"


def kendall_w(scores: np.ndarray) -> float:
    """Kendall's coefficient of concordance W of ``m`` rankings of ``n`` items, with the correction for ties.

    Args:
        scores: ``(m, n)``, one row per ranking (a run), one column per item (a method); higher scores rank
            first. Tied scores share their average rank.

    Returns:
        W in [0, 1]: 1 when every ranking is the same, about 0 when they are unrelated; NaN for fewer than two
        rankings or items, or when every ranking is all ties.

    W = 12 S / (m² (n³ − n) − m Σ T), with S the sum of squared deviations of the items' rank sums from their
    mean and T = Σ (t³ − t) over each ranking's groups of t tied items (Kendall & Babington Smith 1939).
    """
    from scipy.stats import rankdata  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    scores = np.asarray(scores, dtype=float)
    m, n = scores.shape
    if m < 2 or n < 2:
        return math.nan
    ranks = np.vstack([rankdata(-row) for row in scores])
    sums = ranks.sum(axis=0)
    s = float(((sums - sums.mean()) ** 2).sum())
    ties = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts**3 - counts).sum())
    denominator = m**2 * (n**3 - n) - m * ties
    return 12.0 * s / denominator if denominator > 0 else math.nan


def sign_test(k: int, n: int) -> float:
    """Two-sided p-value of ``k`` of ``n`` untied runs going one way when either way is equally likely."""
    from scipy.stats import binomtest  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    if n == 0:
        return 1.0
    return float(binomtest(k, n, 0.5, alternative="two-sided").pvalue)


def runs_needed(alpha: float) -> int:
    """The fewest untied runs for which the sign test can fall below ``alpha``: all ``n`` agreeing gives
    p = 2 · 2⁻ⁿ."""
    return max(1, math.floor(math.log2(2.0 / alpha)) + 1)


def verdict(k: int, n: int, n_runs: int, min_share: float, alpha: float) -> tuple[str, float, str]:
    """The verdict on a statement that holds in ``k`` of ``n_runs`` runs (``n`` of them untied).

    Returns:
        (verdict, p-value, note): :data:`HOLDS` when ``k / n_runs ≥ min_share`` and the sign test gives
        ``p < alpha``; :data:`TOO_FEW` when even ``n`` agreeing runs could not reach ``alpha`` (the note says how
        many would); :data:`NOT_STABLE` otherwise.
    """
    p = sign_test(k, n)
    share = k / n_runs if n_runs else math.nan
    needed = runs_needed(alpha)
    if n < needed:
        untied = f" untied: {n_runs - n} tied or not computable" if n < n_runs else ""
        note = f"{n} runs{untied}; the sign test needs at least {needed} to reach p < {alpha:g}"
        return TOO_FEW, p, note
    if share >= min_share and p < alpha:
        return HOLDS, p, ""
    reasons = []
    if not share >= min_share:
        reasons.append(f"holds in {k} of {n_runs} runs, under {min_share:g}")
    if not p < alpha:
        reasons.append(f"sign test p = {p:.3g} ≥ {alpha:g}")
    return NOT_STABLE, p, "; ".join(reasons)
