"""Attribution tables: per-example and dataset aggregates by hand; CSV / LaTeX / Markdown output."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.render.tables import convergence_table, dataset_aggregate, per_type_sums, ranked, top_tokens, write_table


def test_top_tokens_ties_by_position_and_mask():
    scores = np.array([0.0, 0.5, -0.2, 0.5, 0.9, -0.7])
    labels = ["[CLS]", "a", "b", "a", "c", "d"]
    keep = np.array([False, True, True, True, False, True])
    pos = top_tokens(scores, labels, keep, 2, positive=True)
    assert pos["position"].tolist() == [1, 3] and pos["token"].tolist() == ["a", "a"]
    neg = top_tokens(scores, labels, keep, 2, positive=False)
    assert neg["position"].tolist() == [5, 2]


def test_per_type_and_dataset_aggregates_by_hand():
    ex1 = per_type_sums(np.array([0.1, 0.2, 0.3]), ["x", "y", "x"], ["x", "y", "x"], np.ones(3, bool))
    ex2 = per_type_sums(np.array([0.5, -0.1]), ["x", "z"], ["x", "z"], np.array([True, True]))
    # float64 sums of decimal fractions (0.1 + 0.3 is not 0.4 in binary): approx's default 1e-6 relative
    assert ex1.set_index("key")["attribution"].to_dict() == pytest.approx({"x": 0.4, "y": 0.2})
    agg = dataset_aggregate([ex1, ex2]).set_index("key")
    assert agg.loc["x", "sum_over_n"] == pytest.approx((0.4 + 0.5) / 2)  # legacy: divided by N examples
    assert agg.loc["x", "mean_per_occurrence"] == pytest.approx(0.9 / 3)  # 3 occurrences
    assert agg.loc["x", "occurrences"] == 3 and agg.loc["x", "examples"] == 2
    assert ranked(agg.reset_index(), "sum_over_n", 1, positive=False)["key"].tolist() == ["z"]


def test_legacy_grouping_keeps_duplicate_labels():
    """Legacy groups by the raw token (Ġalgorithms vs algorithms) and shows both stripped (B-18)."""
    sums = per_type_sums(np.array([0.3, 0.2]), ["Ġalgorithms", "algorithms"], ["algorithms"] * 2, np.ones(2, bool))
    assert sums["token"].tolist() == ["algorithms", "algorithms"]


def test_write_table_formats(tmp_path):
    df = pd.DataFrame({"token": ["a_b", "100%"], "position": [3, 4], "attribution": [0.5, -0.25]})
    written = write_table(df, tmp_path / "t", "caption with & and #")
    assert sorted(p.suffix for p in written) == [".csv", ".md", ".tex"]
    back = pd.read_csv(tmp_path / "t.csv")
    pd.testing.assert_frame_equal(back, df)
    tex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    assert r"a\_b" in tex and r"100\%" in tex and r"\&" in tex and "\\toprule" in tex
    md = (tmp_path / "t.md").read_text(encoding="utf-8").splitlines()
    assert md[2] == "| token | position | attribution |" and md[4] == "| a_b | 3 | 0.5000 |"


def test_convergence_table_counts_flagged_examples():

    frame = pd.DataFrame(
        {"n_steps": [16, 32, 32], "converged": [True, True, False], "relative_delta": [0.01, 0.02, 0.2]}
    )
    table = convergence_table(frame).set_index("n_steps")
    assert table.loc["32", "not_converged"] == 1 and table.loc["16", "converged"] == 1
    assert table.loc["all", "examples"] == 3 and table.loc["all", "max_relative_delta"] == 0.2
