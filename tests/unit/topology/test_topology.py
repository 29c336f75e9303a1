"""Attention topology: MI estimators against explicit loops, band pooling against a dense loop,
gudhi persistence against ripser and hand-computed H0, bottleneck against persim, the claim test.

Bounds: float64 code against float64 loops: rounding only (``1e-12``, or the defaults). Pooling from the
float32 bands against the float64 dense reference: float32 sums of ≤ n weights ≤ 1 (``atol=1e-6``);
gudhi against ripser: ripser computes its filtration in float32 (``atol=1e-6`` on distances ≤ 2 ln 2);
bottleneck against persim: both exact matchings, float64 (``abs=1e-9``). A real model's softmax rows:
float32 probabilities summed over ≤ 128 keys (``atol=1e-5``).
"""

import math

import numpy as np
import pytest
from persim import bottleneck as persim_bottleneck
from ripser import ripser
from scipy import stats

from attnlens.classifier.prediction import encode_texts
from attnlens.data.corpus import generate_pairs
from attnlens.models import architecture, forward_bands
from attnlens.pipeline.config import TopologyConfig
from attnlens.stats import rank_correlation
from attnlens.topology import persistence as tp
from attnlens.topology import pooling as tpool
from tests.support.dense import CASES, dense_reference, random_band

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def _loop_pool(dense, unit_of):
    """(L, H, m, m) by an explicit loop: mean over the unit's queries of the attention sent to each unit."""
    L, H = dense.shape[:2]
    m = unit_of.max() + 1
    out = np.zeros((L, H, m, m))
    counts = np.bincount(unit_of[unit_of >= 0], minlength=m)
    for i in range(len(unit_of)):
        for j in range(len(unit_of)):
            if unit_of[i] >= 0 and unit_of[j] >= 0:
                out[:, :, unit_of[i], unit_of[j]] += dense[:, :, i, j]
    return out / counts[:, None]


def _loop_mi(s, estimator, freqs=None):
    L, H, m, _ = s.shape
    mi = np.zeros((m, m))
    for layer in range(L):
        for h in range(H):
            a = s[layer, h]
            p = a / a.sum()
            r, c = p.sum(1), p.sum(0)
            for i in range(m):
                for j in range(m):
                    if estimator == "pooled_pmi":
                        v = math.log2(a[i, j] / (freqs[i] * freqs[j])) if a[i, j] > 0 else 0.0
                    elif estimator == "joint_ppmi":
                        v = math.log2(p[i, j] / (r[i] * r[j])) if p[i, j] > 0 else 0.0
                    else:
                        v = p[i, j] * math.log(p[i, j] / (r[i] * c[j] + tp.EPS)) if p[i, j] > 0 else 0.0
                    mi[i, j] += max(0.0, v)
    return (mi + mi.T) / 2


@pytest.mark.parametrize("estimator", tp.ESTIMATORS)
def test_estimators_match_explicit_loops(estimator):
    rng = np.random.default_rng(0)
    s = rng.random((2, 3, 5, 5))
    s[0, 1, 2, 3] = 0.0  # a zero cell: 0·log 0 = 0
    freqs = rng.random(5) / 5
    got = tp.mutual_information(s, estimator, freqs)
    np.testing.assert_allclose(got, _loop_mi(s, estimator, freqs), rtol=1e-12, atol=1e-12)
    assert (got >= 0).all() and np.allclose(got, got.T)


def test_units_and_frequencies():
    special = np.array([True, False, False, False, False, False, True])
    surfaces = ["[CLS]", "a", "b", ".", "c", "?", "[SEP]"]
    assert tpool.units(surfaces, special, "chunks", 2).tolist() == [-1, 0, 0, 1, 1, 2, -1]
    assert tpool.units(surfaces, special, "sentences", 2).tolist() == [-1, 0, 0, 0, 1, 1, -1]
    assert tpool.units(surfaces, special, "none", 2).tolist() == [-1, 0, 1, 2, 3, 4, -1]
    ids = [101, 7, 7, 8, 7, 9, 102]
    f = tpool.unit_frequencies(ids, tpool.units(surfaces, special, "chunks", 2))
    np.testing.assert_allclose(f, [(3 / 5 + 3 / 5) / 2, (1 / 5 + 3 / 5) / 2, 1 / 5])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_band_pooling_matches_dense_loop(case):
    heads, n, length, window, gpos, x = CASES[case]
    bands = [random_band(heads, n, length, window, gpos, x, seed=case + 10 * k) for k in range(2)]
    special = np.zeros(length, dtype=bool)
    special[0] = length > 2  # drop the first token when there is something left
    unit_of = tpool.units(["w"] * length, special, "chunks", 3)
    if unit_of.max() < 0:
        pytest.skip("no unit")
    dense = np.stack([dense_reference(b).numpy() for b in bands])[:, :, :length, :length]
    np.testing.assert_allclose(tpool.pooled_from_bands(bands, unit_of), _loop_pool(dense, unit_of), atol=1e-6)
    np.testing.assert_allclose(tpool.pooled_from_dense(dense, unit_of), _loop_pool(dense, unit_of), atol=1e-12)


def test_distance_is_a_symmetric_nonnegative_matrix():
    rng = np.random.default_rng(1)
    mi = rng.random((6, 6)) * 5
    mi = (mi + mi.T) / 2
    for how in tp.DISTANCES:
        d = tp.mi_distance(mi, how)
        assert np.allclose(d, d.T) and (np.diag(d) == 0).all() and (d >= 0).all() and d.max() <= tp.TWO_LN2 + 1e-12
    d = tp.mi_distance(mi, "rescale")
    off = ~np.eye(6, dtype=bool)
    i, j = np.unravel_index(np.argmax(np.where(off, mi, -1)), mi.shape)
    assert d[i, j] == 0 and d[off].max() <= tp.TWO_LN2
    np.testing.assert_allclose(tp.mi_distance(mi, "clip")[off], np.maximum(0, tp.TWO_LN2 - mi)[off])
    assert (tp.mi_distance(np.zeros((3, 3)))[~np.eye(3, dtype=bool)] == tp.TWO_LN2).all()


def test_h0_of_points_on_a_line_is_the_gaps():
    x = np.array([0.0, 0.1, 0.35, 0.4, 1.0])
    d = np.abs(x[:, None] - x[None, :])
    dgms, cap = tp.persistence(d, max_dimension=1)
    finite = dgms[0][dgms[0][:, 2] == 0]
    assert sorted(finite[:, 1]) == pytest.approx(sorted(np.diff(x)))
    inf = dgms[0][dgms[0][:, 2] == 1]
    assert len(inf) == 1 and inf[0, 1] == cap == 1.0 and len(dgms[1]) == 0


@pytest.mark.parametrize("seed", range(3))
def test_gudhi_persistence_matches_ripser(seed):

    rng = np.random.default_rng(seed)
    pts = rng.random((14, 2))
    if seed == 2:
        pts = np.c_[
            np.cos(np.linspace(0, 2 * np.pi, 14, endpoint=False)), np.sin(np.linspace(0, 2 * np.pi, 14, endpoint=False))
        ]
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    ours, _ = tp.persistence(d, max_dimension=1)
    ref = ripser(d, distance_matrix=True, maxdim=1)["dgms"]
    for dim in (0, 1):
        mine = ours[dim][ours[dim][:, 2] == 0][:, :2]
        theirs = ref[dim][np.isfinite(ref[dim][:, 1])]
        np.testing.assert_allclose(np.sort(mine, axis=0), np.sort(theirs, axis=0), atol=1e-6)
    if seed == 2:
        assert len(ours[1]) == 1  # the circle's loop


def test_bottleneck_matches_persim_and_caps_infinite_bars():

    rng = np.random.default_rng(3)
    for _ in range(5):
        a = np.sort(rng.random((6, 2)), axis=1)
        b = np.sort(rng.random((4, 2)), axis=1)
        assert tp.bottleneck(a, b) == pytest.approx(persim_bottleneck(a, b), abs=1e-9)
    # an infinite bar capped at the filtration end is an ordinary point: finite distances
    a = np.array([[0.0, 1.386, 1.0], [0.0, 0.2, 0.0]])
    b = np.array([[0.0, 1.386, 1.0]])
    assert tp.bottleneck(a, b) == pytest.approx(0.1)
    m = tp.bottleneck_matrix([a, b, a])
    assert np.allclose(m, m.T) and (np.diag(m) == 0).all() and m[0, 2] == 0


def test_class_separation_on_a_block_matrix():
    labels = np.array([0, 0, 0, 1, 1, 1, 1])
    d = np.where(labels[:, None] == labels[None, :], 0.1, 0.9)
    np.fill_diagonal(d, 0)
    res = tp.class_separation(d, labels, n_permutations=200, seed=0)
    assert res["mean_same_class"] == pytest.approx(0.1) and res["gap"] == pytest.approx(0.8)
    assert res["knn_accuracy"] == 1.0 and res["gap_p_value"] < 0.05 and res["knn_majority_rate"] == 4 / 7
    flat = tp.class_separation(np.ones((7, 7)) - np.eye(7), labels, n_permutations=50, seed=0)
    assert flat["degenerate"] and flat["gap"] == 0 and flat["gap_p_value"] is None and flat["knn_accuracy"] is None
    assert not res["degenerate"]


def test_topology_of_a_real_forward(tiny_classifier):
    """On a real Longformer forward: band pooling = pooling of the dense attention, rows keep their mass."""

    model, tokenizer = tiny_classifier
    encoded = encode_texts(tokenizer, ["a long enough text about attention windows and their bands. " * 3])
    bands = forward_bands(model, encoded.batch([0], arch=architecture(model)))
    n = len(encoded.input_ids[0])
    special = np.zeros(n, dtype=bool)
    special[[0, n - 1]] = True
    unit_of = tpool.units(["w"] * n, special, "chunks", 4)
    pooled = tpool.pooled_from_bands(bands, unit_of)
    dense = np.stack([dense_reference(b).numpy() for b in bands])[:, :, :n, :n]
    np.testing.assert_allclose(pooled, tpool.pooled_from_dense(dense, unit_of), atol=1e-6)
    # each unit's queries send at most their whole attention to kept tokens (CLS and SEP are left out)
    assert (pooled.sum(-1) <= 1 + 1e-5).all() and (pooled.sum(-1) > 0.3).all()
    freqs = tpool.unit_frequencies(encoded.input_ids[0], unit_of)
    for est in tp.ESTIMATORS:
        d = tp.mi_distance(tp.mutual_information(pooled, est, freqs))
        dgms, cap = tp.persistence(d)
        # one bar per unit, less the zero-length ones (rescaling puts the closest pair at distance 0)
        zero = int((d[np.triu_indices(len(d), 1)] == 0).sum())
        assert len(dgms[0]) >= unit_of.max() + 1 - zero and dgms[0][:, 2].sum() == 1 and cap <= tp.TWO_LN2 + 1e-12


def test_dense_encoder_topology(minilm):
    """Any Hugging Face encoder: eager attention of the packaged BERT, pooled per token and per sentence."""
    model, tokenizer = minilm
    batch = tokenizer(["Attention is cheap. Topology is not! Is it useful?"], return_tensors="pt")
    dense = tpool.dense_attentions(model, dict(batch))
    n = int(batch["attention_mask"].sum())
    assert dense.shape == (6, 12, n, n) and np.allclose(dense.sum(-1), 1, atol=1e-5)
    ids = batch["input_ids"][0].tolist()
    special = np.isin(ids, tokenizer.all_special_ids)
    surfaces = tokenizer.convert_ids_to_tokens(ids)
    for pooling, m in (("none", n - 2), ("sentences", 3)):
        unit_of = tpool.units(surfaces, special, pooling, 1)
        assert unit_of.max() + 1 == m
        pooled = tpool.pooled_from_dense(dense, unit_of)
        np.testing.assert_allclose(pooled, _loop_pool(dense, unit_of), atol=1e-12)
        d = tp.mi_distance(tp.mutual_information(pooled, "joint_ppmi"))
        assert np.allclose(d, d.T) and (np.diag(d) == 0).all()


def test_truncated_and_sparse_rips():
    x = np.array([0.0, 0.1, 0.2, 1.0, 1.1])
    d = np.abs(x[:, None] - x[None, :])
    dgms, cap = tp.persistence(d, max_dimension=1, max_edge_length=0.5)
    assert cap == 0.5 and dgms[0][:, 2].sum() == 2  # two clusters never merge below 0.5: both capped
    assert (dgms[0][dgms[0][:, 2] == 1][:, 1] == 0.5).all()
    sparse, _ = tp.persistence(d, max_dimension=1, sparse=0.3)
    assert sparse[0][:, 2].sum() == 1 and len(sparse[0]) <= len(d)


def test_rank_correlation_against_scipy():

    rng = np.random.default_rng(0)
    x = rng.random(30)
    y = x + rng.normal(0, 0.3, 30)
    res = rank_correlation(x, y, n_permutations=500, seed=1)
    assert res["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic) and res["p_value"] < 0.01
    flat = rank_correlation(x, rng.random(30), n_permutations=200, seed=1)
    assert flat["p_value"] > 0.01


def test_text_topology_of_generated_pairs(minilm):
    """Study 3 meets study 2: persistence of each text of a pair under the encoder's own attention."""

    model, tokenizer = minilm
    cfg = TopologyConfig(pooling="none", estimators=("joint_ppmi",))
    pair = generate_pairs(3, seed=0).iloc[2]
    a = tpool.text_topology(model, tokenizer, pair["text_a"], cfg)["joint_ppmi"]
    b = tpool.text_topology(model, tokenizer, pair["text_b"], cfg)["joint_ppmi"]
    n_units = len(tokenizer(pair["text_a"])["input_ids"]) - 2
    assert a[1].shape == (n_units, n_units) and np.isfinite(tp.bottleneck(a[2][0], b[2][0]))
    assert tp.bottleneck(a[2][0], a[2][0]) == 0


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([0, 1], "not computable (n = 2): the label-permutation and 1-NN tests need 3 examples"),
        ([0, 0, 0], "not computable (n = 3): every example has the same class: no different-class pair, no gap"),
    ],
)
def test_class_separation_on_tiny_or_one_class_splits_says_why(labels, expected):
    n = len(labels)
    d = np.arange(1, n * n + 1, dtype=float).reshape(n, n)
    d = d + d.T
    np.fill_diagonal(d, 0)
    res = tp.class_separation(d, np.array(labels), n_permutations=20, seed=0)
    assert expected in res["note"]
    assert res["gap"] != res["gap"]  # NaN: one class, or no different-class pair
    if n < 3:
        assert res["gap_p_value"] is None and res["degenerate"]
