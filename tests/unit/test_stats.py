"""The shared statistics against independent references (scipy, explicit loops).

Bounds: float64 on both sides, the same quantity computed by other code, so rounding only: numpy's
``assert_allclose`` default (1e-7 relative) and ``approx``'s (1e-6). The bootstrap interval's width
against the normal approximation is a statistical bound, not a rounding one (``rel=0.15`` at 2 000
resamples of 400 values).
"""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from attnlens.stats import (
    bootstrap_means,
    cosine,
    holm,
    n_top,
    not_computable,
    pearson,
    permutation_p_value,
    rank_correlation,
)

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


@pytest.mark.parametrize(
    ("fraction", "m", "expected"), [(0.01, 50, 1), (0.1, 50, 5), (0.5, 7, 4), (1.0, 7, 7), (0.0, 7, 0)]
)
def test_n_top(fraction, m, expected):
    assert n_top(fraction, m) == expected


def test_bootstrap_means_paired_and_nan_aware():
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 2.0, size=(400, 3))
    x[::7, 1] = np.nan
    x[:, 2] = 5.0
    mean, lo, hi = bootstrap_means(x, seed=1, n_boot=2000)
    np.testing.assert_allclose(mean, np.nanmean(x, 0))
    half = 1.96 * np.nanstd(x[:, 0], ddof=1) / np.sqrt(400)
    assert hi[0] - lo[0] == pytest.approx(2 * half, rel=0.15)
    assert lo[2] == hi[2] == 5.0 and lo[1] < mean[1] < hi[1]


def test_bootstrap_means_of_one_column_contains_the_mean():
    mean, lo, hi = bootstrap_means(np.array([[1.0], [2.0], [3.0], [4.0], [np.nan]]), seed=0, n_boot=1000)
    assert mean[0] == 2.5 and lo[0] <= mean[0] <= hi[0] and lo[0] >= 1 and hi[0] <= 4


def test_bootstrap_means_equals_resampling_rows_by_hand():
    """The multinomial-weight bootstrap is the row-resampling bootstrap: same percentiles for the same draws."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 2))
    _, lo, hi = bootstrap_means(x, seed=7, n_boot=500)
    weights = np.random.default_rng(7).multinomial(30, np.full(30, 1 / 30), size=500)
    boot = np.stack([np.repeat(x, w, axis=0).mean(0) for w in weights])
    np.testing.assert_allclose(lo, np.percentile(boot, 2.5, axis=0))
    np.testing.assert_allclose(hi, np.percentile(boot, 97.5, axis=0))


def test_cosine_and_pearson_against_scipy():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(2, 5, 40))
    np.testing.assert_allclose(pearson(u, v), [pearsonr(a, b).statistic for a, b in zip(u, v, strict=True)])
    np.testing.assert_allclose(cosine(u, v), (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1))
    assert np.isnan(cosine(np.zeros(3), np.ones(3)))


def test_permutation_p_value_counts_the_observed_arrangement():
    assert permutation_p_value(5.0, []) == 1.0
    assert permutation_p_value(5.0, [1.0, 2.0, 3.0]) == pytest.approx(1 / 4)
    assert permutation_p_value(2.0, [1.0, 2.0, 3.0]) == pytest.approx(3 / 4)
    assert permutation_p_value(2.0, [1.0, 2.0 - 1e-13, 3.0]) == pytest.approx(2 / 4)
    assert permutation_p_value(2.0, [1.0, 2.0 - 1e-13, 3.0], atol=1e-12) == pytest.approx(3 / 4)


def test_rank_correlation_against_scipy_and_a_permutation_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=25)
    y = x + rng.normal(size=25)
    got = rank_correlation(x, y, n_permutations=200, seed=4)
    assert got["spearman"] == pytest.approx(spearmanr(x, y).statistic)
    perm = np.random.default_rng(4)
    rx, ry = np.argsort(np.argsort(x)) + 1.0, np.argsort(np.argsort(y)) + 1.0  # ranks (no ties)
    null = [abs(spearmanr(rx, perm.permutation(ry)).statistic) for _ in range(200)]
    assert got["p_value"] == pytest.approx((1 + sum(v >= abs(got["spearman"]) - 1e-12 for v in null)) / 201)


def test_bootstrap_gives_no_interval_for_a_single_value():
    values = np.array([[0.4, np.nan], [np.nan, np.nan], [0.6, np.nan]])
    values[1, 0] = np.nan
    mean, lo, hi = bootstrap_means(values[:1], seed=0, n_boot=100)  # one example
    assert mean[0] == 0.4 and np.isnan(lo[0]) and np.isnan(hi[0])
    mean, lo, hi = bootstrap_means(values, seed=0, n_boot=100)  # two values in column 0, none in column 1
    assert mean[0] == pytest.approx(0.5) and lo[0] <= 0.5 <= hi[0] and np.isnan(mean[1]) and np.isnan(lo[1])
    assert not_computable(1) == "not computable (n = 1)"
    assert not_computable(2, "why") == "not computable (n = 2): why"


def test_holm_rejects_as_the_step_down_procedure_does():
    """Holm's procedure run literally at each level α: reject the i-th smallest p while every p_(j ≤ i) is at most
    α / (m − j + 1); an adjusted p-value is below α exactly where its hypothesis is rejected. NaN stays out."""
    rng = np.random.default_rng(4)
    p = np.concatenate([rng.uniform(0, 0.02, 5), rng.uniform(0, 1, 15), [np.nan]])
    adjusted = holm(p)
    assert np.isnan(adjusted[-1]) and (adjusted[:-1] >= p[:-1]).all() and (adjusted[:-1] <= 1).all()
    order = np.argsort(p[:-1])
    m = len(order)
    for alpha in (0.001, 0.01, 0.05, 0.2):
        rejected = np.zeros(m, dtype=bool)
        for j, i in enumerate(order):
            if p[i] > alpha / (m - j):
                break
            rejected[i] = True
        assert np.array_equal(adjusted[:-1] <= alpha, rejected)
    # float64 products of a p-value by 3 or 2: a rounding each, 1e-17 at these values, well under the bound
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06], rtol=0, atol=1e-15)
