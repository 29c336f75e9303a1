"""Attention vs attribution similarity: every metric against scipy, the ``rbo`` package and brute force.

The legacy references below are straight transcriptions of the notebooks' per-example functions
(recipes §11.1–11.2), written with loops, sets, ``np.percentile``, ``scipy.stats`` and ``rbo`` —
independent of the vectorised code under test.

Bounds: float64 on both sides, the same statistic by other code, so rounding only: ``abs=1e-12`` for
single correlations and overlaps of ≤ 200 items, ``abs=1e-10`` for the per-example metric sets (means over
thresholded vectors of a few hundred values), the defaults (1e-6 / 1e-7 relative) elsewhere. The synthetic
recovery checks (``abs=0.02``–``0.03``) are statistical: the sampling spread of a mean over 40 examples.
"""

import math

import numpy as np
import pandas as pd
import pytest
import rbo
from scipy import stats

from attnlens import stats as stats_mod
from attnlens.data.sources import MANIFEST_SCHEMA
from attnlens.errors import InputError
from attnlens.io import load_parquet, provenance, save_json, save_parquet
from attnlens.pipeline.config import SimilarityConfig
from attnlens.render.tables import number, paper_table
from attnlens.sharding import example_rng
from attnlens.similarity import aggregate as agg
from attnlens.similarity import measures
from attnlens.similarity import metrics as sim
from attnlens.similarity import paper as paper_layout
from attnlens.stages.report import run_aggregate_similarity

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

# --- independent references ---------------------------------------------------------------------


def _cos(u, v):
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


def _mm(v):
    return (v - v.min()) / (v.max() - v.min())


def _notebook_orders(x, sort):
    order = np.argsort(x, kind="stable" if sort == "stable" else None)[::-1]
    return order, np.argsort(order)


def _notebook_legacy(a, att, mask=None, sort="stable"):
    """get_sim_dataframe (mask None) / get_sim_dataframe_alpha: zero-fill, then every metric."""
    x1, x2 = _mm(np.abs(a)), _mm(att)
    if mask is not None:
        x1, x2 = x1.copy(), x2.copy()
        x1[~mask] = 0
        x2[~mask] = 0
    out = {"cosine_raw": _cos(a, att), "cosine": _cos(x1, x2)}
    for name, fn in (
        ("cosine_median", np.median),
        ("cosine_mean", np.mean),
        ("cosine_p95", lambda v: np.percentile(v, 95)),
    ):
        y1, y2 = x1.copy(), x2.copy()
        y1[y1 < fn(y1)] = 0
        y2[y2 < fn(y2)] = 0
        out[name] = _cos(y1, y2)
    s1 = {i for i in range(len(x1)) if x1[i] >= np.percentile(x1, 95) and x1[i] != 0}
    s2 = {i for i in range(len(x2)) if x2[i] >= np.percentile(x2, 95) and x2[i] != 0}
    out["jaccard_top5"] = len(s1 & s2) / (len(s1) + len(s2) - len(s1 & s2))
    o1, r1 = _notebook_orders(x1, sort)
    o2, r2 = _notebook_orders(x2, sort)
    out["rank_cosine"] = _cos(r1.astype(float), r2.astype(float))
    out["kendall_tau"] = stats.kendalltau(r1, r2).statistic
    out["rbo_ao"] = rbo.RankingSimilarity(list(o1), list(o2)).rbo()
    num = 2048 - math.ceil(2048 * 0.95)
    q1, q2 = r1.copy(), r2.copy()
    q1[q1 > num] = 0
    q2[q2 > num] = 0
    out["rank_cosine_p95"] = _cos(q1.astype(float), q2.astype(float))
    out["rbo_ao_p95"] = rbo.RankingSimilarity(list(o1[:num]), list(o2[:num])).rbo()
    return out


def _fixed_reference(a, att, valid, rbo_p=(0.9, 0.98), fraction=0.05):
    av, tv = a[valid], att[valid]
    mag = np.abs(av)
    o1, o2 = np.argsort(-mag, kind="stable"), np.argsort(-tv, kind="stable")
    k = math.ceil(fraction * len(av))
    out = {
        "cosine_raw": _cos(av, tv),
        "cosine": _cos(_mm(mag), _mm(tv)),
        "spearman": stats.spearmanr(mag, tv).statistic,
        "kendall_tau_b": stats.kendalltau(mag, tv).statistic,
        "rbo_ao": rbo.RankingSimilarity(list(o1), list(o2)).rbo(p=1.0),
        "jaccard_top5": len(set(o1[:k]) & set(o2[:k])) / len(set(o1[:k]) | set(o2[:k])),
    }
    for p in rbo_p:
        out[sim.rbo_name(p)] = rbo.RankingSimilarity(list(o1), list(o2)).rbo_ext(p=p)
    return out


def _brute_tau_b(x, y):
    n = len(x)
    s = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            s += dx * dy
            tx += dx == 0
            ty += dy == 0
    n0 = n * (n - 1) / 2
    return s / math.sqrt((n0 - tx) * (n0 - ty))


def _example(n=300, seed=0, n_layers=2, zeros=5):
    """Random attribution (some exact zeros), attention, masks and specials with known layer vectors."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    a[rng.choice(n, zeros, replace=False)] = 0.0
    received = rng.gamma(0.5, size=(n_layers, 3, n)).astype(np.float32)
    importance = {"legacy": rng.random((n_layers, 3)), "fixed": rng.random((n_layers, 3))}
    keep = {"legacy": rng.random(n) > 0.4, "fixed": rng.random(n) > 0.5}
    special = np.zeros(n, dtype=bool)
    special[[0, n - 1]] = True
    keep["fixed"] &= ~special
    return a, received, importance, keep, special


def _rows(frame, **where):
    sel = np.ones(len(frame), dtype=bool)
    for k, v in where.items():
        sel &= (frame[k] == v).to_numpy()
    return frame[sel].set_index("metric")


# --- single metrics -------------------------------------------------------------------------------


@pytest.mark.parametrize("n,levels", [(2, 2), (7, 3), (60, 5), (400, 40), (400, 10_000)])
def test_kendall_tau_b_matches_scipy_and_brute_force(n, levels):
    rng = np.random.default_rng(n + levels)
    x = rng.integers(0, levels, n).astype(float)
    ys = rng.integers(0, levels, (5, n))
    got = measures.kendall_tau_b(x, np.stack([measures.dense_ranks(y) for y in ys]))
    for g, y in zip(got, ys, strict=True):
        ref = stats.kendalltau(x, y).statistic
        assert g == pytest.approx(ref, abs=1e-12, nan_ok=True)
        if n <= 60 and not np.isnan(ref):
            assert g == pytest.approx(_brute_tau_b(x, y), abs=1e-12)


def test_kendall_tau_b_constant_side_is_nan():
    assert np.isnan(measures.kendall_tau_b(np.ones(10), measures.dense_ranks(np.arange(10.0))[None])[0])
    assert np.isnan(measures.kendall_tau_b(np.arange(10.0), np.zeros((1, 10), dtype=np.int64))[0])


@pytest.mark.parametrize("seed", range(3))
def test_overlap_curve_gives_rbo_package_values(seed):
    rng = np.random.default_rng(seed)
    s, t = rng.random(257), rng.random(257)
    s[:20] = 0.5  # ties: stable order
    x = measures.overlap_curve(measures.descending_positions(s), measures.descending_positions(t))
    o1, o2 = list(np.argsort(-s, kind="stable")), list(np.argsort(-t, kind="stable"))
    ref = rbo.RankingSimilarity(o1, o2)
    assert measures.average_overlap(x)[0] == pytest.approx(ref.rbo(p=1.0), abs=1e-12)
    assert measures.average_overlap(x, 40)[0] == pytest.approx(rbo.RankingSimilarity(o1[:40], o2[:40]).rbo(), abs=1e-12)
    for p in (0.5, 0.9, 0.98):
        assert measures.rbo_ext(x, p)[0] == pytest.approx(ref.rbo_ext(p=p), abs=1e-12)
    for d in (1, 13, 257):
        assert x[0, d - 1] == len(set(o1[:d]) & set(o2[:d]))


def test_identical_and_reversed_rankings():
    v = np.arange(50.0)
    x = measures.overlap_curve(measures.descending_positions(v), measures.descending_positions(v))
    assert measures.average_overlap(x)[0] == 1.0 and measures.rbo_ext(x, 0.9)[0] == pytest.approx(1.0)
    assert measures.kendall_tau_b(v, measures.dense_ranks(-v)[None])[0] == pytest.approx(-1.0)


def test_legacy_ranks_are_the_notebook_recipe():
    v = np.array([0.3, 0.0, 0.9, 0.0, 0.3, 0.1])
    order = np.argsort(v, kind="stable")[::-1]
    assert measures.legacy_ranks(v)[0].tolist() == np.argsort(order).tolist()
    assert measures.legacy_ranks(v)[0][2] == 0  # the largest gets rank 0


def test_minmax_and_cosine_edge_cases():
    assert np.isnan(measures.minmax(np.ones(4))).all()
    assert np.isnan(stats_mod.cosine(np.zeros(3), np.ones(3)))
    u, v = np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])
    assert stats_mod.cosine(u, v) == pytest.approx(_cos(u, v))
    assert stats_mod.pearson(u, v) == pytest.approx(stats.pearsonr(u, v).statistic)


def test_n_top():
    assert [stats_mod.n_top(0.05, m) for m in (0, 1, 20, 21, 100, 2046)] == [0, 1, 1, 2, 5, 103]


# --- whole examples against the transcriptions -----------------------------------------------------


@pytest.mark.parametrize("sort", ["stable", "numpy"])
def test_legacy_rows_match_the_notebook_transcription(sort):
    a, received, importance, keep, special = _example()
    frame = sim.compare_example("e", a, received, importance, keep, special, n_permutations=0, legacy_sort=sort)
    assert set(frame["metric"][frame["mode"] == "legacy"]) == set(sim.LEGACY_METRICS)
    for scaled in (False, True):
        att = (received[1].astype(np.float64) * (importance["legacy"][1][:, None] if scaled else 1.0)).sum(0)
        for mask in ("none", "legacy", "fixed"):
            ref = _notebook_legacy(a, att, None if mask == "none" else keep[mask], sort)
            got = _rows(frame, mode="legacy", configuration="last", scaled=scaled, mask=mask)["value"]
            for metric, value in ref.items():
                assert got[metric] == pytest.approx(value, abs=1e-10), (mask, scaled, metric)


def test_fixed_rows_match_scipy_and_rbo():
    a, received, importance, keep, special = _example(seed=3)
    frame = sim.compare_example("e", a, received, importance, keep, special, n_permutations=0)
    for scaled in (False, True):
        att = (received.astype(np.float64) * (importance["fixed"][:, :, None] if scaled else 1.0)).sum((0, 1))
        for mask in ("none", "legacy", "fixed"):
            valid = ~special if mask == "none" else keep[mask] & ~special
            ref = _fixed_reference(a, att, valid)
            got = _rows(frame, mode="fixed", configuration="all", scaled=scaled, mask=mask)
            assert (got["n"] == valid.sum()).all()
            for metric, value in ref.items():
                assert got.loc[metric, "value"] == pytest.approx(value, abs=1e-10), (mask, scaled, metric)


def test_layer_configurations_sum_the_right_layers():
    rng = np.random.default_rng(0)
    received = rng.random((4, 2, 9))
    imp = {"legacy": rng.random((4, 2)), "fixed": rng.random((4, 2))}
    vec = sim.attention_vectors(received, imp)
    np.testing.assert_allclose(vec[("fixed", "lower", False)], received[:2].sum((0, 1)))
    np.testing.assert_allclose(vec[("fixed", "upper", False)], received[2:].sum((0, 1)))
    np.testing.assert_allclose(vec[("legacy", "last", True)], (received[3] * imp["legacy"][3][:, None]).sum(0))
    np.testing.assert_allclose(vec[("fixed", "all", True)], (received * imp["fixed"][:, :, None]).sum((0, 1)))


def test_chance_baseline_is_the_metric_on_permuted_attributions():
    a, received, importance, keep, special = _example(n=120, seed=5)
    frame = sim.compare_example("ex-1", a, received, importance, keep, special, n_permutations=25, seed=9)
    att = received.astype(np.float64).sum((0, 1))
    # legacy: permutations of the whole sequence (stream 0)
    perms = sim.permutations(example_rng(9, "ex-1", 0), len(a), 25)
    legacy = [_cos(a[p], att) for p in perms[1:]]
    row = _rows(frame, mode="legacy", configuration="all", scaled=False, mask="none").loc["cosine_raw"]
    assert row["chance"] == pytest.approx(np.mean(legacy)) and row["chance_sd"] == pytest.approx(np.std(legacy, ddof=1))
    assert row["z"] == pytest.approx((row["value"] - np.mean(legacy)) / np.std(legacy, ddof=1))
    assert row["p_perm"] == pytest.approx((1 + sum(v >= row["value"] for v in legacy)) / 26)
    # fixed, mask "fixed" (stream 3): permutations within the kept positions only
    valid = keep["fixed"] & ~special
    idx = np.flatnonzero(valid)
    perms = sim.permutations(example_rng(9, "ex-1", 3), len(idx), 25)
    fixed = [stats.spearmanr(np.abs(a[idx][p]), att[idx]).statistic for p in perms[1:]]
    row = _rows(frame, mode="fixed", configuration="all", scaled=False, mask="fixed").loc["spearman"]
    assert row["chance"] == pytest.approx(np.mean(fixed), abs=1e-12)
    # the same example id and seed give the same rows
    again = sim.compare_example("ex-1", a, received, importance, keep, special, n_permutations=25, seed=9)
    pd.testing.assert_frame_equal(frame, again)


def test_too_few_kept_positions_give_nan_not_a_crash():
    a, received, importance, keep, special = _example(n=40)
    keep["fixed"][:] = False
    keep["fixed"][5] = True
    frame = sim.compare_example("e", a, received, importance, keep, special, n_permutations=5)
    rows = frame[(frame["mode"] == "fixed") & (frame["mask"] == "fixed")]
    assert rows["value"].isna().all() and (rows["n"] == 1).all()


def test_mismatched_lengths_raise():
    a, received, importance, keep, special = _example(n=30)
    with pytest.raises(ValueError, match="attention has 30 tokens, attribution 29"):
        sim.compare_example("e", a[:-1], received, importance, keep, special)


# --- B-5: the masking artefact ---------------------------------------------------------------------


@pytest.mark.parametrize("sort", ["stable", "numpy"])
def test_shared_zero_mask_inflates_legacy_metrics_and_fixed_stay_at_chance(sort):
    """recipes §11.2: independent vectors + a shared 55 % zero mask → legacy rank-cos ≈ 0.96, τ ≈ 0.64, AO ≈ 0.74."""
    n, trials = 2048, 6
    rng = np.random.default_rng(11)
    got = {k: [] for k in ("plain", "masked", "fixed", "legacy_excess")}
    for trial in range(trials):
        a, t = rng.random(n), rng.random(n)
        mask = rng.random(n) >= 0.55
        received = np.stack([np.zeros((1, n)), t[None]])  # "last" configuration = t
        imp = {"legacy": np.ones((2, 1)), "fixed": np.ones((2, 1))}
        frame = sim.compare_example(
            f"sim{trial}",
            a,
            received,
            imp,
            {"legacy": mask, "fixed": mask},
            np.zeros(n, dtype=bool),
            n_permutations=20,
            legacy_sort=sort,
        )
        legacy = frame[(frame["mode"] == "legacy") & (frame["configuration"] == "last") & ~frame["scaled"]]
        got["plain"].append(legacy[legacy["mask"] == "none"].set_index("metric")["value"])
        masked = legacy[legacy["mask"] == "legacy"].set_index("metric")
        got["masked"].append(masked["value"])
        got["legacy_excess"].append(masked["value"] - masked["chance"])
        fixed = frame[(frame["mode"] == "fixed") & (frame["configuration"] == "last") & ~frame["scaled"]]
        got["fixed"].append(fixed[fixed["mask"] == "legacy"].set_index("metric")[["value", "chance", "z"]])
    plain = pd.concat(got["plain"], axis=1).mean(1)
    masked = pd.concat(got["masked"], axis=1).mean(1)
    assert plain["rank_cosine"] == pytest.approx(0.75, abs=0.02)
    assert plain["kendall_tau"] == pytest.approx(0.0, abs=0.03)
    assert plain["rbo_ao"] == pytest.approx(0.5, abs=0.03)
    assert masked["rank_cosine"] > 0.94 and masked["kendall_tau"] > 0.6 and masked["rbo_ao"] > 0.72
    # the legacy chance level moves with it: the "gain" is the recipe, not agreement
    excess = pd.concat(got["legacy_excess"], axis=1).mean(1)
    for metric in ("rank_cosine", "kendall_tau", "rbo_ao"):
        assert abs(excess[metric]) < 0.03
    fixed = pd.concat(got["fixed"]).groupby(level=0).mean()
    for metric in ("spearman", "kendall_tau_b"):
        assert abs(fixed.loc[metric, "value"]) < 0.03
    assert fixed.loc["rbo_ao", "value"] == pytest.approx(0.5, abs=0.03)
    for metric in ("spearman", "kendall_tau_b", "rbo_ao", "cosine"):  # near-normal under permutation
        assert abs(fixed.loc[metric, "z"]) < 1.5, metric
    for metric in ("rbo_p0.9", "rbo_p0.98", "jaccard_top5"):  # heavy-tailed (one lucky top token): no z
        assert abs(fixed.loc[metric, "value"] - fixed.loc[metric, "chance"]) < 0.03, metric


# --- per-head agreement and the in-depth view -----------------------------------------------------


def test_head_agreement_against_scipy():
    a, received, _, _, special = _example(n=80)
    frame = sim.head_agreement(a, received, ~special, 0.1)
    assert len(frame) == received.shape[0] * received.shape[1]
    k = math.ceil(0.1 * 78)
    top_a = set(np.argsort(-np.abs(a[1:-1]), kind="stable")[:k])
    for row in frame.itertuples():
        head = received[row.layer, row.head, 1:-1]
        assert row.spearman == pytest.approx(stats.spearmanr(head, np.abs(a[1:-1])).statistic)
        top_h = set(np.argsort(-head, kind="stable")[:k])
        assert row.jaccard_top5 == pytest.approx(len(top_a & top_h) / len(top_a | top_h))


def test_top_set_table_legacy_and_fixed():
    rng = np.random.default_rng(2)
    n = 200
    a, t = rng.normal(size=n), rng.random(n)
    labels = [f"w{i % 17}" for i in range(n)]
    keep = rng.random(n) > 0.3
    special = np.zeros(n, dtype=bool)
    special[0] = True
    table, shared, union = paper_layout.top_set_table(labels, a, t, "legacy", keep, special, 0.05)
    x1, x2 = _mm(np.abs(a)), _mm(t)
    x1[~keep], x2[~keep] = 0, 0
    s1 = set(np.flatnonzero((x1 >= np.percentile(x1, 95)) & (x1 != 0)))
    s2 = set(np.flatnonzero((x2 >= np.percentile(x2, 95)) & (x2 != 0)))
    assert set(table.loc[table["set"] == "shared", "position"]) == s1 & s2
    assert set(table.loc[table["set"] == "attention_only", "position"]) == s2 - s1
    assert set(table.loc[table["set"] == "attribution_only", "position"]) == s1 - s2
    assert (shared, union) == (len(s1 & s2), len(s1 | s2))
    top_t = table[table["set"] == "attention_only"]
    assert top_t["attention_rank"].is_monotonic_increasing and top_t["attention_rank"].min() >= 1
    fixed, shared, union = paper_layout.top_set_table(labels, a, t, "fixed", None, special, 0.05)
    k = math.ceil(0.05 * (n - 1))
    f1 = set(1 + np.argsort(-np.abs(a[1:]), kind="stable")[:k])
    f2 = set(1 + np.argsort(-t[1:], kind="stable")[:k])
    assert set(fixed.loc[fixed["set"] == "shared", "position"]) == f1 & f2 and union == len(f1 | f2)
    counts = paper_layout.value_counts(fixed)
    assert counts["total"].sum() == len(fixed) and list(counts.columns[1:4]) == list(paper_layout.SET_ORDER)


# --- aggregation ----------------------------------------------------------------------------------


def _synthetic_rows(n_examples=40, seed=0):
    """Per-example rows with known structure: masked ≈ unmasked + 0.1 (distinct), scaled = unscaled."""
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(n_examples):
        for mode, metrics in (
            ("legacy", ("cosine", "kendall_tau", "rbo_ao", "jaccard_top5", "rank_cosine")),
            ("fixed", ("cosine", "kendall_tau_b", "rbo_p0.9", "jaccard_top5")),
        ):
            for layers in ("last", "all"):
                for metric in metrics:
                    base = rng.random()
                    for scaled in (False, True):
                        for mask in sim.MASKS:
                            value = base + (0.1 + 1e-3 * rng.random() if mask != "none" else 0.0)
                            rows.append(
                                (f"e{e}", 0, 0, layers, scaled, mask, mode, metric, value, 0.5, 0.1, 0, 0.01, 100)
                            )
    return pd.DataFrame(rows, columns=list(sim.COLUMNS))


def test_summarise_tests_and_masking_increase():
    frame = _synthetic_rows()
    summary = agg.summarise(frame, seed=0, n_boot=200)
    row = summary.set_index(agg.GROUP).loc[("fixed", "last", True, "fixed", "cosine")]
    part = frame[(frame["mode"] == "fixed") & (frame["configuration"] == "last") & frame["scaled"]]
    part = part[(part["mask"] == "fixed") & (part["metric"] == "cosine")]
    assert row["mean"] == pytest.approx(part["value"].mean()) and row["n_examples"] == 40
    assert row["chance"] == 0.5 and row["excess"] == pytest.approx(part["value"].mean() - 0.5)
    assert row["frac_significant"] == 1.0 and row["ci_lo"] <= row["mean"] <= row["ci_hi"]
    tests = agg.paired_tests(frame)
    t = tests[(tests["comparison"] == "masked − unmasked") & (tests["mode"] == "legacy")].iloc[0]
    assert t["median_difference"] == pytest.approx(0.1, abs=2e-3) and t["n"] == 40
    pair = frame[(frame["mode"] == "legacy") & (frame["configuration"] == t["configuration"])]
    pair = pair[(pair["metric"] == t["metric"]) & ~pair["scaled"]].set_index(["mask", "example_id"])["value"]
    assert t["held"] == "mask legacy, scaled False"
    assert t["p_value"] == pytest.approx(stats.wilcoxon(pair["legacy"] - pair["none"]).pvalue)
    s = tests[tests["comparison"] == "scaled − unscaled"].iloc[0]
    assert s["median_difference"] == 0 and np.isnan(s["p_value"])  # identical pairs: no test
    inc = paper_layout.masking_increase(summary, (0.9,)).set_index(["mode", "name"])
    means = summary.set_index(agg.GROUP)["mean"]
    expected = np.mean(
        [
            (means[("legacy", ly, sc, "legacy", "kendall_tau")] - means[("legacy", ly, sc, "none", "kendall_tau")])
            / means[("legacy", ly, sc, "none", "kendall_tau")]
            * 100
            for ly in ("last", "all")
            for sc in (True, False)
        ]
    )
    assert inc.loc[("legacy", "kendall_tau"), "pct_increase"] == pytest.approx(expected)
    assert inc.loc[("legacy", "kendall_tau"), "delta_value"] == pytest.approx(0.1, abs=2e-3)
    assert inc.loc[("legacy", "kendall_tau"), "delta_chance"] == 0
    assert (inc["note"] == "").all()
    # an unmasked mean of 0 has no percentage: left out, and said
    zero = summary.copy()
    plain = (zero["mode"] == "legacy") & (zero["mask"] == "none") & (zero["metric"] == "kendall_tau")
    zero.loc[plain & (zero["configuration"] == "last"), "mean"] = 0.0
    inc = paper_layout.masking_increase(zero, (0.9,)).set_index(["mode", "name"])
    assert (
        inc.loc[("legacy", "kendall_tau"), "note"]
        == "pct_increase from 2 of 4 cells: the unmasked mean is 0 in the others"
    )
    zero.loc[plain, "mean"] = 0.0
    inc = paper_layout.masking_increase(zero, (0.9,)).set_index(["mode", "name"])
    assert np.isnan(inc.loc[("legacy", "kendall_tau"), "pct_increase"])
    assert inc.loc[("legacy", "kendall_tau"), "note"].startswith("pct_increase not computable")


def test_paper_table_and_legacy_layout():
    summary = agg.summarise(_synthetic_rows(), seed=0, n_boot=100)
    table = paper_table(summary, paper_layout.paper_metrics((0.9,))["similarity"])
    assert len(table) == 8 and list(table.columns[:3]) == ["layers", "scaled", "masked"]
    assert "τ-b fixed" in table.columns and "RBO fixed (p = 0.9, ext)" in table.columns
    cell = table.loc[0, "cosine legacy"]
    assert cell.endswith("(0.500)") and cell.count("[") == 1
    layout = paper_layout.legacy_means_layout(summary)
    assert list(layout.columns) == [
        "example",
        "mean_cosine_sim",
        "mean_cosine_sim_ranks",
        "mean_kendall_tau",
        "mean_RBO",
        "mean_Jaccard_95th",
        "scaled",
        "alpha_only",
    ]
    assert set(layout["example"]) == {"attrib_vs_layer12_attn", "attrib_vs_all_layer_attn"} and len(layout) == 8
    assert (layout["mean_cosine_sim"] == layout["mean_cosine_sim"].round(6)).all()


def test_aggregate_with_a_second_dataset_writes_tables_3_and_4(tmp_path):

    for name, seed in (("main", 0), ("notes", 1)):
        save_parquet(_synthetic_rows(12, seed), tmp_path / name / "shard0.parquet", provenance(sim.SIMILARITY_SCHEMA))
    cfg = SimilarityConfig(
        n_boot=50, dataset_name="papers", extra_datasets=({"name": "notes", "path": str(tmp_path / "notes")},)
    )
    manifest = tmp_path / "split_manifest.json"
    save_json({"name": "discharge notes"}, manifest, provenance(MANIFEST_SCHEMA))
    main = [tmp_path / "main/shard0.parquet"]
    run_aggregate_similarity(cfg, main, manifest, tmp_path / "summary.parquet", tmp_path / "tables")
    names = {p.name for p in (tmp_path / "tables").iterdir()}
    for stem in (
        "table1_similarity",
        "table2_jaccard",
        "table3_similarity_notes",
        "table4_jaccard_notes",
        "masking_increase",
    ):
        assert {f"{stem}.csv", f"{stem}.tex", f"{stem}.md"} <= names, stem
    assert "12 examples" in (tmp_path / "tables/table3_similarity_notes.md").read_text(encoding="utf-8")
    summary, prov = load_parquet(tmp_path / "summary.parquet", agg.SUMMARY_SCHEMA)
    assert set(summary["dataset"]) == {"papers", "notes"} and "B-5" in prov["deviations"]
    bad = SimilarityConfig(extra_datasets=({"name": "gone", "path": str(tmp_path / "missing")},))
    with pytest.raises(InputError, match=r"similarity.extra_datasets\[gone\]: path: expected"):
        run_aggregate_similarity(bad, main, manifest, tmp_path / "s2.parquet", tmp_path / "t2")
    assert not (tmp_path / "t2").exists() and not (tmp_path / "s2.parquet").exists()
    # without dataset_name, the dataset is named by its source (the split manifest's name)
    run_aggregate_similarity(SimilarityConfig(n_boot=20), main, manifest, tmp_path / "s3.parquet", tmp_path / "t3")
    assert set(load_parquet(tmp_path / "s3.parquet")[0]["dataset"]) == {"discharge notes"}
    assert "discharge notes, 12 examples" in (tmp_path / "t3/table1_similarity.md").read_text(encoding="utf-8")
    clash = SimilarityConfig(extra_datasets=({"name": "discharge notes", "path": str(tmp_path / "notes")},))
    with pytest.raises(InputError, match="names other than this run's dataset name 'discharge notes'"):
        run_aggregate_similarity(clash, main, manifest, tmp_path / "s4.parquet", tmp_path / "t4")


def test_numbers_never_print_negative_zero():
    assert number(-0.00001, 3) == "0.000" and number(-0.0004, 4) == "-0.0004" and number(0.12345, 3) == "0.123"
    assert number(-1e-9, 4) == "0.0000" and number(-0.5, 1) == "-0.5"


def test_tiny_splits_give_a_value_or_a_reason_never_a_crash():
    """One, two or three examples (and untyped object columns, as an old empty shard gave)."""
    rows = _synthetic_rows(3, 0)
    for n in (1, 2, 3):
        part = rows[rows["example_id"].isin(sorted(rows["example_id"].unique())[:n])].astype({"value": object})
        summary = agg.summarise(part.astype({"value": float}), seed=0, n_boot=50)
        assert (summary["n_examples"] <= n).all()
        if n == 1:
            assert summary["ci_lo"].isna().all()
            assert (summary["note"] == "not computable (n = 1): a bootstrap interval needs 2 examples").all()
            cell = paper_table(summary, paper_layout.paper_metrics((0.9,))["similarity"]).iloc[0, 3]
            assert "[no interval: not computable (n = 1)" in cell
        else:
            assert not summary["ci_lo"].isna().any() and (summary["note"] == "").all()
        tests = agg.paired_tests(part)
        assert len(tests) and not tests["note"].eq("").all()  # fewer than 6 pairs: p cannot fall below 0.05
        undefined = tests["p_value"].isna()
        assert tests.loc[undefined, "note"].str.startswith("not computable").all()


def test_aggregate_of_one_example_notes_what_it_could_not_compute(tmp_path):
    rows = _synthetic_rows(3, 0)
    one = rows[rows["example_id"] == rows["example_id"].iloc[0]]
    save_parquet(one, tmp_path / "shard0.parquet", provenance(sim.SIMILARITY_SCHEMA))
    manifest = tmp_path / "split_manifest.json"
    save_json({"name": "one note"}, manifest, provenance(MANIFEST_SCHEMA))
    run_aggregate_similarity(
        SimilarityConfig(n_boot=20),
        [tmp_path / "shard0.parquet"],
        manifest,
        tmp_path / "summary.parquet",
        tmp_path / "tables",
    )
    _, prov = load_parquet(tmp_path / "summary.parquet", agg.SUMMARY_SCHEMA)
    n = len(agg.summarise(one, 0, 20))
    assert (
        f"one note: {n} of {n} dataset means not computable (n = 1): a bootstrap interval needs 2 examples"
        in (prov["notes"])
    )
    table = (tmp_path / "tables/table1_similarity.csv").read_text(encoding="utf-8")
    assert "nan" not in table.lower() and "no interval: not computable (n = 1)" in table
