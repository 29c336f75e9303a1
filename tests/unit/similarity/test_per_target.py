"""Per-target agreement (attnlens.similarity.per_target): the agreement between two explained targets'
attributions against scipy's Kendall τ_b and a brute-force top-k Jaccard, and the table's means, intervals and
pair counts against hand-built rows; where attention goes (attnlens.similarity.regions) against shares by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attnlens.similarity.per_target import METRICS, VIEW, pair_agreement, target_agreement, target_sensitivity
from attnlens.similarity.regions import (
    COLUMNS,
    OTHER,
    ROW_COLUMNS,
    SPECIAL,
    query_attention_table,
    query_rows,
    region_masks,
    region_tau,
    shares,
)
from attnlens.stats import n_top

pytestmark = pytest.mark.numerics


def test_pair_agreement_is_kendall_and_jaccard_of_the_magnitudes():
    """|a_j| against |a_k| over the kept tokens: τ_b as scipy computes it (ties included: the same float64 sums,
    1e-12), the top-5 % Jaccard as set arithmetic on the stable descending orders; both symmetric."""
    rng = np.random.default_rng(0)
    n = 60
    scores = {0: rng.normal(size=n), 2: rng.normal(size=n), 3: np.round(rng.normal(size=n), 1)}  # ties in one
    valid = np.ones(n, dtype=bool)
    valid[[0, n - 1]] = False  # the special tokens
    pairs = pair_agreement("doc", scores, valid, (0.9,), 0.05)
    assert len(pairs) == 3 * 2 * len(METRICS)  # ordered pairs × metrics
    idx = np.flatnonzero(valid)
    k = n_top(0.05, len(idx))
    for j, other in ((0, 2), (2, 3), (3, 0)):
        x, y = np.abs(scores[j][idx]), np.abs(scores[other][idx])
        got = pairs[(pairs["target"] == j) & (pairs["other"] == other)].set_index("metric")["value"]
        assert got["kendall_tau_b"] == pytest.approx(stats.kendalltau(x, y).statistic, rel=1e-12)
        top_x = set(np.argsort(-x, kind="stable")[:k].tolist())
        top_y = set(np.argsort(-y, kind="stable")[:k].tolist())
        assert got["jaccard_top5"] == pytest.approx(len(top_x & top_y) / len(top_x | top_y), rel=1e-12)
        back = pairs[(pairs["target"] == other) & (pairs["other"] == j)].set_index("metric")["value"]
        assert back.to_dict() == pytest.approx(got.to_dict(), rel=1e-12)
    assert pair_agreement("doc", {1: scores[0]}, valid, (0.9,), 0.05).empty  # one target: no pair


def _rows(values: dict[tuple[str, int], float], configuration: str = "all") -> pd.DataFrame:
    rows = []
    for (eid, target), value in values.items():
        for metric in METRICS:
            rows.append(
                {
                    "example_id": eid,
                    "target": target,
                    "target_rank": 0,
                    "configuration": configuration,
                    "scaled": VIEW["scaled"],
                    "mask": VIEW["mask"],
                    "mode": VIEW["mode"],
                    "metric": metric,
                    "value": value,
                    "chance": 0.0,
                }
            )
    return pd.DataFrame(rows)


def test_the_table_averages_documents_and_counts_each_pair_once_overall():
    similarity = pd.concat([_rows({("a", 0): 0.2, ("a", 1): 0.4, ("b", 0): 0.6}), _rows({("a", 0): 9.0}, "last")])
    similarity = pd.concat([similarity, _rows({("a", 0): 5.0}).assign(mask="none")])  # other views: not read
    pairs = pd.DataFrame(
        [("a", 0, 1, m, 0.3, 10) for m in METRICS] + [("a", 1, 0, m, 0.3, 10) for m in METRICS],
        columns=["example_id", "target", "other", "metric", "value", "n"],
    )
    table = target_agreement(similarity, pairs, ("tort", "contract"), seed=0, n_boot=200)
    row = table[(table["configuration"] == "all") & (table["metric"] == "kendall_tau_b")].set_index("name")
    assert row.loc["tort", "attention"] == pytest.approx(0.4) and row.loc["tort", "n_explanations"] == 2
    assert row.loc["contract", "attention"] == pytest.approx(0.4) and row.loc["contract", "n_pairs"] == 1
    # overall: document a's two explanations averaged first (0.3), then with b (0.6): 0.45, not 0.4
    assert row.loc["all", "attention"] == pytest.approx(0.45) and row.loc["all", "n_explanations"] == 3
    assert row.loc["all", "n_pairs"] == 1 and row.loc["all", "between_targets"] == pytest.approx(0.3)
    # paired by document and target: only document a has pairs; tort 0.2 − 0.3, contract 0.4 − 0.3, and a's two
    # differences averaged for the overall row (b, which has no pair, is not in it)
    assert (
        row.loc["tort", "difference"] == pytest.approx(-0.1)
        and row.loc["contract", "difference"] == pytest.approx(0.1)
        and row.loc["all", "difference"] == pytest.approx(0.0, abs=1e-15)
    )
    assert np.isnan(row.loc["tort", "difference_lo"]) and np.isnan(row.loc["tort", "difference_hi"])  # one document
    last = table[(table["configuration"] == "last") & (table["name"] == "tort")].iloc[0]
    assert last["attention"] == pytest.approx(9.0)
    single = target_agreement(_rows({("a", 1): 0.5, ("b", 1): 0.7}), pairs.iloc[:0], ("x", "y"), 0, 200)
    assert set(single["name"]) == {"y", "all"}
    assert single.loc[single["configuration"] == "all", "note"].str.contains("no other target").all()
    assert single["difference"].isna().all()  # nothing to pair with
    assert single.loc[single["configuration"] == "last", "note"].str.startswith("not computable (n = 0)").all()


def test_target_sensitivity_is_one_for_a_method_blind_to_the_target_and_averages_documents_first():
    """A method that gives one map whatever the target agrees perfectly with itself (τ_b 1, Jaccard 1); a method
    whose explanation of each target is independent noise agrees about as chance does (|τ_b| within 4/√n of 0,
    Kendall's τ's null standard deviation being √(2(2n+5)/(9n(n−1))) ≈ 2/(3√n)); a document's pairs are averaged
    before the documents are, and a method with no pair says why."""
    rng = np.random.default_rng(1)
    n = 400
    valid = np.ones(n, dtype=bool)
    one_map = rng.random(n)
    blind = pd.concat([pair_agreement(d, {t: one_map for t in range(3)}, valid, (0.9,), 0.05) for d in "ab"])
    noisy = pd.concat(
        [
            pair_agreement(d, {t: rng.normal(size=n) for t in range(k)}, valid, (0.9,), 0.05)
            for d, k in (("a", 3), ("b", 2))
        ]
    )
    table = target_sensitivity({"ig": noisy, "attention_last": blind, "rollout": noisy.iloc[:0]}, 0, 200)
    assert table["method"].tolist() == ["ig"] * 2 + ["attention_last"] * 2 + ["rollout"] * 2
    row = table.set_index(["method", "metric"])
    assert row.loc[("attention_last", "kendall_tau_b"), "between_targets"] == 1.0
    assert row.loc[("attention_last", "jaccard_top5"), "between_targets"] == 1.0
    assert abs(row.loc[("ig", "kendall_tau_b"), "between_targets"]) < 4 / np.sqrt(n)
    assert row.loc[("ig", "kendall_tau_b"), "n_pairs"] == 3 + 1 and row.loc[("ig", "kendall_tau_b"), "n_documents"] == 2
    once = noisy[(noisy["target"] < noisy["other"]) & (noisy["metric"] == "kendall_tau_b")]
    by_doc = once.groupby("example_id")["value"].mean()
    assert row.loc[("ig", "kendall_tau_b"), "between_targets"] == pytest.approx(by_doc.mean(), rel=1e-12)
    assert row.loc[("rollout", "kendall_tau_b"), "note"].startswith("no document with two targets")
    assert np.isnan(row.loc[("rollout", "kendall_tau_b"), "between_targets"])


# --- where attention goes (attnlens.similarity.regions) -----------------------------------------------------


def test_regions_are_disjoint_first_named_first_and_cover_every_token():
    named = {"answer": np.array([0, 0, 1, 1, 0, 0], bool), "sentence": np.array([0, 1, 1, 1, 1, 0], bool)}
    special = np.array([1, 0, 0, 0, 0, 1], bool)
    masks = region_masks(named, special)
    assert list(masks) == ["answer", "sentence", SPECIAL, OTHER]
    assert masks["answer"].tolist() == [0, 0, 1, 1, 0, 0] and masks["sentence"].tolist() == [0, 1, 0, 0, 1, 0]
    assert (np.sum(list(masks.values()), axis=0) == 1).all()  # each token in exactly one region
    got = shares(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 0.0]), masks)
    assert got == {"answer": 0.5, "sentence": 0.5, SPECIAL: 0.0, OTHER: 0.0}
    assert np.isnan(shares(np.zeros(6), masks)["answer"])


def test_query_rows_and_the_table_are_the_shares_by_hand():
    """The last layer's and every layer's head-mean attention, the attribution's absolute mass and the tokens, each
    shared out by region; the table's means are the plain means over documents (exact: the bootstrap's mean is the
    sample mean, float64 sums of ≤ 3 terms: 1e-12) and its difference the paired one."""
    masks = region_masks({"evidence": np.array([0, 1, 1, 0], bool)}, np.array([1, 0, 0, 1], bool))
    attention = np.array([[[1.0, 1, 1, 1], [1, 1, 1, 1]], [[0.0, 3, 1, 0], [0, 1, 3, 0]]])  # (L=2, H=2, n=4)
    rows = pd.DataFrame(query_rows("d", "[CLS]", attention, np.array([0.0, -3, 1, 0]), masks), columns=ROW_COLUMNS)
    last = rows[rows["configuration"] == "last"].set_index("region")
    assert last.loc["evidence", "attention"] == 1.0 and last.loc[SPECIAL, "attention"] == 0.0
    every = rows[rows["configuration"] == "all"].set_index("region")
    assert every.loc["evidence", "attention"] == pytest.approx(12 / 16)  # (4 + 8) of (8 + 8)
    assert every.loc["evidence", "attribution"] == 1.0 and every.loc["evidence", "tokens"] == 0.5
    other = rows.assign(example_id="e", attention=rows["attention"] / 2)
    table = query_attention_table(pd.concat([rows, other]), seed=0, n_boot=200).set_index(["configuration", "region"])
    cell = table.loc[("all", "evidence")]
    assert cell["n_documents"] == 2 and cell["attention"] == pytest.approx(0.75 * 0.75, abs=1e-12)
    assert cell["difference"] == pytest.approx(0.75 * 0.75 - 1.0, abs=1e-12)
    assert ["group", *table.columns[1:]] == [c for c in COLUMNS if c not in ("configuration", "region")]
    assert set(table.index.get_level_values(1)) == {"evidence", SPECIAL, OTHER}


def test_the_rank_agreement_inside_a_region_is_scipys_kendall_tau_b():
    """Agreement restricted to a region (a supporting sentence): τ_b of the attention and the attribution's magnitude
    over the region's tokens, as scipy computes it (the same call on the same float64 values: equal); undefined
    (NaN) under three tokens or on a constant side."""
    rng = np.random.default_rng(4)
    attention, magnitude = rng.random(20), np.round(rng.random(20), 1)  # ties in one
    mask = np.zeros(20, dtype=bool)
    mask[5:15] = True
    assert region_tau(attention, magnitude, mask) == stats.kendalltau(attention[5:15], magnitude[5:15]).statistic
    assert np.isnan(region_tau(attention, magnitude, np.arange(20) < 2))
    assert np.isnan(region_tau(np.ones(20), magnitude, mask))
    masks = region_masks({"sentence": mask}, np.arange(20) == 0)
    rows = pd.DataFrame(query_rows("d", "answer", np.tile(attention, (2, 3, 1)), magnitude, masks), columns=ROW_COLUMNS)
    last = rows[rows["configuration"] == "last"].set_index("region")["kendall_tau_b"]
    assert last["sentence"] == pytest.approx(region_tau(attention, magnitude, mask), abs=1e-12)  # the head mean
    table = query_attention_table(rows, seed=0, n_boot=200).set_index(["configuration", "region"])
    assert table.loc[("last", "sentence"), "n_tau"] == 1 and table.loc[("last", SPECIAL), "n_tau"] == 0
    assert "not computable (n = 0): τ_b needs 3 tokens" in table.loc[("last", SPECIAL), "note"]  # a reason, not NaN
