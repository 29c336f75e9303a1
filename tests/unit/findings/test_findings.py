"""Findings across runs: Kendall's W and the sign test against hand computations and scipy, and the verdicts on
planted effects in synthetic run tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from attnlens.findings.statements import (
    ALL_MODELS,
    FAILS,
    PASSES,
    concordance,
    describe,
    flag_failures,
    headline_values,
    rankings,
    sanity_verdicts,
    statements,
)
from attnlens.findings.verdicts import HOLDS, NOT_STABLE, TOO_FEW, kendall_w, runs_needed, sign_test, verdict

pytestmark = pytest.mark.numerics


def test_kendall_w_matches_a_hand_computation():
    # three rankings of four items: rank sums 4, 6, 8, 12 (mean 7.5), S = 3.5² + 1.5² + 0.5² + 4.5² = 35,
    # W = 12 S / (m² (n³ − n)) = 420 / 540
    ranks = np.array([[1, 2, 3, 4], [1, 3, 2, 4], [2, 1, 3, 4]], dtype=float)
    assert kendall_w(-ranks) == pytest.approx(420 / 540, abs=1e-15)


def test_kendall_w_corrects_for_ties_by_hand():
    # rankings (1, 2.5, 2.5) and (1, 2, 3): rank sums 2, 4.5, 5.5 (mean 4), S = 6.5; one tie of 2 gives
    # T = 2³ − 2 = 6; W = 12 · 6.5 / (2² (3³ − 3) − 2 · 6) = 78 / 84
    scores = np.array([[3.0, 1.0, 1.0], [3.0, 2.0, 1.0]])
    assert kendall_w(scores) == pytest.approx(78 / 84, abs=1e-15)


def test_kendall_w_is_one_for_identical_rankings_and_nan_when_undefined():
    rng = np.random.default_rng(0)
    row = rng.normal(size=7)
    assert kendall_w(np.vstack([row, row * 2, row + 1])) == pytest.approx(1.0, abs=1e-15)
    assert math.isnan(kendall_w(row[None, :]))
    assert math.isnan(kendall_w(np.ones((3, 4))))


@pytest.mark.parametrize(("k", "n"), [(0, 1), (6, 6), (5, 6), (3, 6), (9, 12), (12, 20), (1, 7)])
def test_sign_test_is_the_two_sided_binomial_test(k, n):
    # the closed form: twice the tail of Binomial(n, 1/2) beyond the observed count, capped at 1
    tail = sum(math.comb(n, i) for i in range(max(k, n - k), n + 1)) / 2**n
    assert sign_test(k, n) == pytest.approx(min(1.0, 2 * tail), rel=1e-12)
    assert sign_test(k, n) == pytest.approx(binomtest(k, n, 0.5).pvalue, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1, 0.2])
def test_runs_needed_is_the_fewest_unanimous_runs_that_reach_alpha(alpha):
    n = runs_needed(alpha)
    assert sign_test(n, n) < alpha <= sign_test(n - 1, n - 1)


def test_verdicts():
    assert verdict(6, 6, 6, 0.8, 0.05)[0] == HOLDS
    assert verdict(5, 5, 5, 0.8, 0.05)[0] == TOO_FEW
    assert "needs at least 6" in verdict(5, 5, 5, 0.8, 0.05)[2]
    assert verdict(6, 12, 12, 0.8, 0.05)[0] == NOT_STABLE
    # significant but under the share: 14 of 20 runs, two of them ties
    result, p, note = verdict(14, 18, 20, 0.8, 0.05)
    assert p < 0.05 and result == NOT_STABLE and "under 0.8" in note


def _leaderboard(values: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"method": m, "metric": "comprehensiveness", "group": "faithfulness", "mean": v, "chance": np.nan}
            for m, v in values.items()
        ]
    )


def _runs(n_runs: int, seed: int = 0) -> pd.DataFrame:
    """Synthetic run tables with planted effects: A beats B by a wide margin in every run; C against D is a coin
    flip (each wins in half the runs); two models."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n_runs):
        c_wins = i % 2 == 0
        board = _leaderboard(
            {
                "A": 0.5 + rng.uniform(0, 0.01),
                "B": 0.1 + rng.uniform(0, 0.01),
                "C": 0.3 + (0.01 if c_wins else -0.01),
                "D": 0.3,
            }
        )
        summary = pd.DataFrame(
            [
                {
                    "mode": "fixed",
                    "configuration": "last",
                    "scaled": False,
                    "mask": mask,
                    "metric": "spearman",
                    "mean": mean,
                    "chance": 0.0,
                }
                for mask, mean in (("fixed", 0.4 + rng.uniform(0, 0.05)), ("none", 0.2 + rng.uniform(0, 0.05)))
            ]
        )
        v = headline_values(metrics={"accuracy": 0.9, "macro_f1": 0.8}, summary=summary, leaderboard=board)
        v["run"], v["dataset"], v["model"], v["seed"] = f"r{i}", "syn", f"m{i % 2}", i
        frames.append(v)
    return pd.concat(frames, ignore_index=True)


def _verdict_of(said: pd.DataFrame, text: str, model: str = ALL_MODELS) -> str:
    row = said[(said["model"] == model) & said["statement"].str.startswith(text)]
    assert len(row) == 1, said["statement"].tolist()
    return row["verdict"].iloc[0]


def test_planted_effects_hold_and_coin_flips_are_not_stable():
    said = statements(_runs(12), min_share=0.8, alpha=0.05)
    assert _verdict_of(said, "A better than B on comprehensiveness") == HOLDS
    assert _verdict_of(said, "C better than D") == NOT_STABLE or _verdict_of(said, "D better than C") == NOT_STABLE
    assert _verdict_of(said, "spearman (last layers, unscaled) masked > unmasked") == HOLDS
    assert _verdict_of(said, "spearman (last layers, unscaled, mask fixed) above chance") == HOLDS
    # within one model (six seeds each) every run agrees on A and B: enough for the sign test
    assert _verdict_of(said, "A better than B", model="m0") == HOLDS


def test_too_few_runs_is_not_called_unstable():
    said = statements(_runs(4), min_share=0.8, alpha=0.05)
    assert _verdict_of(said, "A better than B") == TOO_FEW
    assert set(said["verdict"]) == {TOO_FEW}


def test_describe_and_concordance_against_numpy():
    values = _runs(6)
    described = describe(values)
    row = described[(described["model"] == ALL_MODELS) & (described["item"] == "A")].iloc[0]
    a = values[(values["item"] == "A")]["value"].to_numpy()
    assert (row["n_runs"], row["mean"], row["std"], row["min"], row["max"]) == pytest.approx(
        (6, a.mean(), a.std(ddof=1), a.min(), a.max()), rel=1e-15
    )
    w = concordance(values).set_index(["model", "metric"]).loc[(ALL_MODELS, "comprehensiveness")]
    scores = values[values["family"] == "leaderboard"].pivot(index="run", columns="item", values="value")
    assert w["kendall_w"] == pytest.approx(kendall_w(scores.to_numpy()), abs=1e-15)
    assert w["mean_ranking"].startswith("A > ")
    ranked = rankings(values)
    assert (ranked[ranked["method"] == "A"]["rank"] == 1).all() and (ranked[ranked["method"] == "B"]["rank"] == 4).all()


def test_a_method_that_ignores_the_weights_fails_the_sanity_check():
    rows = []
    for run, model in (("r0", "m0"), ("r1", "m0"), ("r2", "m1")):
        for method, deep in (("echo", 0.9), ("grad", 0.1)):
            for level, layers, rho in (("head", 0, 0.95), ("top1", 1, (0.95 + deep) / 2), ("top2", 2, deep)):
                rows.append(
                    {
                        "example_id": "e",
                        "method": method,
                        "level": level,
                        "layers": layers,
                        "spearman": rho,
                        "position": 0.9 if method == "echo" else 0.1,
                        "run": run,
                        "dataset": "syn",
                        "model": model,
                        "seed": 0,
                    }
                )
    verdicts = sanity_verdicts(pd.DataFrame(rows), max_rho=0.5)
    final = verdicts[verdicts["verdict"] != ""].set_index(["model", "method"])["verdict"]
    assert final[(ALL_MODELS, "echo")] == FAILS and final[(ALL_MODELS, "grad")] == PASSES
    assert final[("m0", "echo")] == FAILS and len(final) == 6  # one verdict per scope and method, at the deepest level
    said = flag_failures(statements(_runs(6).replace({"item": {"A": "echo", "B": "grad"}}), 0.8, 0.05), verdicts)
    flagged = said[said["note"].str.contains(FAILS)]
    assert len(flagged) and flagged["statement"].str.contains("echo").all()
    assert (flagged["kind"] == "method ordering").all()
    # the echo's randomised scores follow position: the verdict's note says so, the other's says nothing
    notes = verdicts[verdicts["verdict"] != ""].set_index(["model", "method"])["note"]
    assert "follow position (mean ρ +0.90)" in notes[(ALL_MODELS, "echo")] and notes[(ALL_MODELS, "grad")] == ""


def _answer_board(lds: dict[str, float], drop: dict[str, float]) -> pd.DataFrame:
    rows = [
        {"method": m, "metric": metric, "group": group, "mean": v, "chance": np.nan}
        for metric, group, values in (("lds", "ablation", lds), ("top1_drop", "ablation", drop))
        for m, v in values.items()
    ]
    rows += [{"method": m, "metric": "seconds", "group": "cost", "mean": 1.0, "chance": np.nan} for m in lds]
    return pd.DataFrame(rows)


def test_an_answer_leaderboard_gives_ranked_rows_and_each_methods_share_of_the_surrogates_lds():
    lds = {"surrogate": 0.5, "learned_attention": 0.42, "attention_all": -0.1, "exact_shapley": 0.9}
    board = _answer_board(lds, {"surrogate": 1.0, "planted_ceiling": 1.0})
    values = headline_values(answer_leaderboard=board, surrogate_share=0.8).set_index(["family", "item", "metric"])
    # the exact values and the precision ceiling are what methods are measured against, not methods: no finding
    assert not {"exact_shapley", "planted_ceiling"} & set(values.index.get_level_values("item"))
    assert values.loc[("answer leaderboard", "learned_attention", "lds"), "higher_is_better"]
    assert values.loc[("answer leaderboard", "surrogate", "seconds"), "higher_is_better"] is None  # not ranked
    share = values.loc[("against the surrogate", "learned_attention", "LDS / the surrogate's")]
    assert (share["value"], share["chance"]) == (pytest.approx(0.42 / 0.5, rel=1e-15), 0.8)
    assert values.loc[("against the surrogate", "attention_all", "LDS / the surrogate's"), "value"] < 0
    assert ("against the surrogate", "surrogate", "LDS / the surrogate's") not in values.index
    # a surrogate that predicts nothing (LDS ≤ 0): no share of it means anything
    none = headline_values(answer_leaderboard=_answer_board({"surrogate": 0.0, "learned_attention": 0.3}, {}))
    assert none[none["family"] == "against the surrogate"]["value"].isna().all()


def _answer_runs(n_runs: int) -> pd.DataFrame:
    """Answer leaderboards with planted effects: leave-one-out is best on LDS in every run; learned attention reaches
    85 % of the surrogate's LDS in every run, raw attention 20 %; on the top-1 drop every method ties."""
    frames = []
    for i in range(n_runs):
        lds = {"surrogate": 0.6, "leave_one_out": 0.7 + 0.01 * i, "learned_attention": 0.51, "attention_all": 0.12}
        board = _answer_board(lds, dict.fromkeys(lds, 1.0))
        v = headline_values(answer_leaderboard=board, surrogate_share=0.8)
        v["run"], v["dataset"], v["model"], v["seed"] = f"r{i}", "syn", "m", i
        frames.append(v)
    return pd.concat(frames, ignore_index=True)


def test_the_best_method_and_the_share_of_the_surrogate_are_stated_across_runs():
    said = statements(_answer_runs(6), min_share=0.8, alpha=0.05)
    said = said[said["model"] == "m"]
    assert _verdict_of(said, "leave_one_out is the best method on lds", "m") == HOLDS
    tie = said[(said["kind"] == "best method") & (said["metric"] == "top1_drop")].iloc[0]
    assert tie["statement"].startswith("no method is the best on top1_drop alone") and tie["verdict"] == TOO_FEW
    assert _verdict_of(said, "learned_attention reaches 80% of the surrogate's LDS", "m") == HOLDS
    assert _verdict_of(said, "attention_all stays under 80% of the surrogate's LDS", "m") == HOLDS
    assert not said["statement"].str.contains("seconds").any()  # cost columns are reported, not ranked
    assert set(rankings(_answer_runs(2))["metric"]) == {"lds", "top1_drop"}


def test_the_findings_are_stated_per_planted_structure_too():
    """The leaderboard per planted structure: each column named with its structure, so every statement is made, and
    judged across the runs, per structure: here the surrogate is best on redundant contexts in every run and
    leave-one-out on single ones (where removing the one stating sentence is all that matters)."""
    frames = []
    for i in range(6):
        whole = _answer_board({"surrogate": 0.6, "leave_one_out": 0.5, "exact_shapley": 0.9}, {})
        parts = []
        for structure, lds in (("single", (0.5, 0.8 + 0.01 * i)), ("redundant", (0.7, 0.1))):
            board = _answer_board({"surrogate": lds[0], "leave_one_out": lds[1], "exact_shapley": 1.0}, {})
            parts.append(board.assign(structure=structure))
        v = headline_values(answer_leaderboard=whole, answer_structures=pd.concat(parts, ignore_index=True))
        v["run"], v["dataset"], v["model"], v["seed"] = f"r{i}", "syn", "m", i
        frames.append(v)
    values = pd.concat(frames, ignore_index=True)
    mine = values.set_index(["item", "metric"])
    assert mine.loc[("leave_one_out", "lds (single)"), "value"].iloc[0] == 0.8
    assert mine.loc[("surrogate", "seconds (redundant)"), "higher_is_better"].isna().all()  # cost: not ranked
    assert "exact_shapley" not in set(values["item"])  # a reference, not a method, in every structure too
    said = statements(values, min_share=0.8, alpha=0.05)
    said = said[said["model"] == "m"]
    overall = said[said["statement"] == "surrogate is the best method on lds"]
    assert overall["verdict"].tolist() == [HOLDS]
    assert _verdict_of(said, "surrogate is the best method on lds (redundant)", "m") == HOLDS
    assert _verdict_of(said, "leave_one_out is the best method on lds (single)", "m") == HOLDS
    assert {"lds (single)", "lds (redundant)"} <= set(rankings(values)["metric"])
    unplanted = pd.DataFrame(columns=["structure", "n_answers"])  # what the rule writes where no context plants one
    alone = headline_values(answer_leaderboard=whole)
    pd.testing.assert_frame_equal(headline_values(answer_leaderboard=whole, answer_structures=unplanted), alone)
