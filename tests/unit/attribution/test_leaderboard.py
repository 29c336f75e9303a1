"""The explanation leaderboard's numbers against scipy, the rbo package and plain loops.

Bounds: float64 on both sides, the same statistic computed by other code: rounding only, inside
``approx``'s default 1e-6 relative (RBO's series: ``abs=1e-9``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import rbo
from scipy import stats

from attnlens.attribution.leaderboard import EXAMPLE_COLUMNS, agreement_rows, metrics, summarise
from attnlens.render.tables import leaderboard_table

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def _scores(seed=0, n=60):
    rng = np.random.default_rng(seed)
    ig = rng.normal(size=n)
    special = np.zeros(n, dtype=bool)
    special[[0, n - 1]] = True
    return (
        ig,
        special,
        {
            "close": np.abs(ig) + rng.normal(scale=0.1, size=n),
            "noise": rng.random(n),
            "tied": np.round(rng.random(n), 1),
        },
    )


def test_agreement_matches_scipy_and_rbo():
    ig, special, scores = _scores()
    rows = agreement_rows("e1", ig, scores, special, n_permutations=50, top_fraction=0.1, rbo_p=[0.9], seed=1)
    frame = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS)).set_index(["method", "metric"])
    keep = ~special
    a = np.abs(ig[keep])
    for method, s in scores.items():
        t = s[keep]
        assert frame.loc[(method, "spearman"), "value"] == pytest.approx(stats.spearmanr(a, t).statistic)
        assert frame.loc[(method, "kendall_tau_b"), "value"] == pytest.approx(stats.kendalltau(a, t).statistic)
        k = int(np.ceil(0.1 * len(a)))
        top_a = set(np.argsort(-a, kind="stable")[:k])
        top_t = set(np.argsort(-t, kind="stable")[:k])
        assert frame.loc[(method, "jaccard_top10"), "value"] == pytest.approx(len(top_a & top_t) / len(top_a | top_t))
        ranked_a = list(np.argsort(-a, kind="stable"))
        ranked_t = list(np.argsort(-t, kind="stable"))
        expected = rbo.RankingSimilarity(ranked_a, ranked_t).rbo_ext(p=0.9)
        assert frame.loc[(method, "rbo_p0.9"), "value"] == pytest.approx(expected, abs=1e-9)
    # chance levels sit near 0 for the rank correlations; a close copy of |IG| is far above them
    assert abs(frame.loc[("close", "spearman"), "chance"]) < 0.15
    assert frame.loc[("close", "spearman"), "value"] > 0.9


def test_agreement_of_a_too_short_example_is_nan():
    rows = agreement_rows(
        "e",
        np.ones(3),
        {"m": np.ones(3)},
        np.array([True, False, True]),
        n_permutations=5,
        top_fraction=0.05,
        rbo_p=[0.9],
        seed=0,
    )
    assert rows and all(np.isnan(r[3]) for r in rows)


def test_summary_means_intervals_and_paired_tests():
    rng = np.random.default_rng(3)
    rows = []
    for i in range(30):
        base = rng.normal()
        rows += [
            (f"e{i}", "attention_all", "comprehensiveness", base, np.nan),
            (f"e{i}", "better", "comprehensiveness", base + 0.5 + rng.normal(scale=0.1), np.nan),
            (f"e{i}", "same", "comprehensiveness", base, np.nan),
            (f"e{i}", "better", "seconds", 2.0, np.nan),
        ]
    frame = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS))
    columns = metrics(0.05, [0.9], 10)
    summary = summarise(frame, columns, "attention_all", seed=0, n_boot=500).set_index(["method", "metric"])
    better = summary.loc[("better", "comprehensiveness")]
    values = frame[(frame.method == "better") & (frame.metric == "comprehensiveness")]["value"].to_numpy()
    assert better["mean"] == pytest.approx(values.mean())
    assert better["lo"] < values.mean() < better["hi"]
    base = frame[(frame.method == "attention_all") & (frame.metric == "comprehensiveness")]["value"].to_numpy()
    assert better["p_value"] == pytest.approx(stats.wilcoxon(values - base).pvalue)
    assert better["versus"] == "attention_all" and better["p_value"] < 1e-6
    # the paired difference: its mean and an interval from the same resamples, narrower than the means' (the
    # examples' own spread cancels in a pair); Holm over the table's two finite tests doubles the smaller p
    assert better["difference"] == pytest.approx((values - base).mean(), abs=1e-12)
    assert better["difference_lo"] < (values - base).mean() < better["difference_hi"]
    assert better["difference_hi"] - better["difference_lo"] < (better["hi"] - better["lo"]) / 5
    finite = summary["p_value"].dropna()
    assert len(finite) == 1 and better["p_holm"] == pytest.approx(better["p_value"])
    assert np.isnan(summary.loc[("same", "comprehensiveness"), "p_value"])  # every difference is 0
    assert summary.loc[("attention_all", "comprehensiveness"), "versus"] == ""
    # only claims are tested: a reference row, and a cost column (the baseline's seconds given too), are not
    timed = pd.concat([frame, frame.assign(method="attention_all")[frame.metric == "seconds"].assign(value=1.0)])
    again = summarise(timed, columns, "attention_all", 0, 50, references={"same"}).set_index(["method", "metric"])
    assert "no paired test: reported, not ranked" in again.loc[("better", "seconds"), "note"]
    assert np.isnan(again.loc[("better", "seconds"), "p_value"]) and again.loc[("better", "seconds"), "difference"] == 1
    assert "no paired test: a reference, not a method" in again.loc[("same", "comprehensiveness"), "note"]
    table = leaderboard_table(summary.reset_index(), columns).set_index("method")
    assert table.loc["better", "comprehensiveness AOPC"].endswith("*")
    assert table.loc["attention_all", "seconds per example"] == "–"
    assert list(table.index) == ["attention_all", "better", "same"]
