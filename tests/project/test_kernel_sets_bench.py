"""``benchmarks/kernel_sets.py``'s bookkeeping on made-up runs: how far two runs lie apart, each column's best
methods (ties kept), and the seeds' ranges it reads them against (its runs are `make bench`'s, never a test's)."""

from __future__ import annotations

import pytest

from benchmarks.kernel_sets import apart, best, ranked, spread


def _run(exact_match: float, answers: dict, lds: dict, drop: dict) -> dict:
    board = {m: {"top1_drop": drop[m], "lds": lds[m], "seconds": 1.0, "cost_ratio": 2.0} for m in lds}
    return {"exact_match": exact_match, "answers": answers, "leaderboard": board}


A = _run(1.0, {"q1": "Ada", "q2": "Lund"}, {"attnlrp": 0.80, "surrogate": 0.82}, {"attnlrp": 8.0, "surrogate": 8.0})
B = _run(
    0.9375,
    {"q1": "Ada", "q2": "Byrne", "q3": "x"},
    {"attnlrp": 0.85, "surrogate": 0.81},
    {"attnlrp": 7.5, "surrogate": 8.25},
)


def test_the_cost_columns_are_not_ranked_and_ties_keep_every_best_method():
    assert ranked(A["leaderboard"]) == ["top1_drop", "lds"]
    assert best(A["leaderboard"], "top1_drop") == ["attnlrp", "surrogate"]
    assert best(A["leaderboard"], "lds") == ["surrogate"]


def test_two_runs_apart_cell_by_cell():
    d = apart(A, B)
    assert d["exact_match_difference"] == pytest.approx(-0.0625, abs=1e-15)  # dyadic: exact in float64
    assert d["explained_in_both"] == 2 and d["same_answers"] == 0.5  # q3 is explained by one run only
    assert d["leaderboard_difference"]["attnlrp"] == {"top1_drop": -0.5, "lds": pytest.approx(0.05, abs=1e-15)}
    assert d["largest_difference"] == {"top1_drop": 0.5, "lds": pytest.approx(0.05, abs=1e-15)}
    assert d["same_best"] == {"top1_drop": False, "lds": False}
    assert d["best"]["lds"] == [["surrogate"], ["attnlrp"]]
    assert apart(A, A)["same_best"] == {"top1_drop": True, "lds": True}


def test_the_seeds_ranges_are_max_minus_min():
    s = spread([A, B, A])
    assert s["exact_match"] == 0.0625
    assert s["leaderboard"]["surrogate"] == {"top1_drop": 0.25, "lds": pytest.approx(0.01, abs=1e-15)}
    assert s["largest"] == {"top1_drop": 0.5, "lds": pytest.approx(0.05, abs=1e-15)}
