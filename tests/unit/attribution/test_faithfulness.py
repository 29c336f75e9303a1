"""Faithfulness curves and plausibility against brute-force references.

Bounds: the curves' probabilities come from float32 forwards of the same inputs batched differently
(``rtol=1e-5``, ~100 float32 ulps of a probability); AOPC and plausibility are float64 means of a few
numbers against the same arithmetic written out (``approx``'s default 1e-6 relative).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.attribution.ranking_faithfulness import (
    aopc,
    evidence_labels,
    perturb,
    plausibility,
    random_ranking,
    ranking,
)
from attnlens.attribution.removal import evaluate_example
from attnlens.classifier.prediction import Encoded
from attnlens.models import architecture

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def test_ranking_orders_by_score_then_position():
    scores = np.array([9.0, 0.5, 2.0, 2.0, -1.0, 9.0])
    eligible = np.array([False, True, True, True, True, False])
    assert ranking(scores, eligible).tolist() == [2, 3, 1, 4]
    perm = random_ranking(eligible, 0, "a")
    assert sorted(perm.tolist()) == [1, 2, 3, 4]
    assert perm.tolist() == random_ranking(eligible, 0, "a").tolist()
    assert {tuple(random_ranking(eligible, 0, str(i))) for i in range(30)} != {tuple(perm)}


def test_perturb_deletes_or_keeps_on_ids():
    ids = [101, 7, 8, 9, 10, 102]
    special = np.array([True, False, False, False, False, True])
    order = np.array([3, 1, 4, 2])
    assert perturb(ids, order, special, 2, "deletion") == [101, 8, 10, 102]
    assert perturb(ids, order, special, 2, "insertion") == [101, 7, 9, 102]
    assert perturb(ids, order, special, 0, "insertion") == [101, 102]
    assert perturb(ids, order, special, 4, "deletion") == [101, 102]


def test_evaluate_example_end_points(tiny_classifier):
    model, tokenizer = tiny_classifier
    ids = tokenizer("faithfulness curves of a tiny model on token ids")["input_ids"]
    special = np.array([i in (tokenizer.cls_token_id, tokenizer.sep_token_id) for i in ids])
    orders = {"a": ranking(np.arange(len(ids), dtype=float), ~special), "b": random_ranking(~special, 1, "x")}
    frame = evaluate_example(model, ids, special, orders, 1, [0.2, 0.5], batch_size=3)
    assert len(frame) == 2 * 2 * 4  # rankings × curves × {0, 0.2, 0.5, 1}
    with torch.no_grad():
        full = torch.softmax(
            model(**Encoded([ids], tokenizer.pad_token_id).batch([0], arch=architecture(model))).logits, -1
        )
    d0 = frame[(frame.curve == "deletion") & (frame.fraction == 0)]["prob"]
    i1 = frame[(frame.curve == "insertion") & (frame.fraction == 1)]["prob"]
    np.testing.assert_allclose(d0, float(full[0, 1]), rtol=1e-5)  # nothing deleted = everything kept
    np.testing.assert_allclose(i1, float(full[0, 1]), rtol=1e-5)
    ins0 = frame[(frame.curve == "insertion") & (frame.fraction == 0)]
    assert (ins0["n_tokens"] == 0).all() and ins0["prob"].nunique() == 1


def test_aopc_by_hand():
    rows = []
    for curve, probs in (("deletion", [0.9, 0.6, 0.3, 0.1]), ("insertion", [0.2, 0.5, 0.8, 0.9])):
        for f, p in zip([0.0, 0.1, 0.5, 1.0], probs, strict=True):
            rows.append(("e", "ig", curve, f, 0, p))
    curves = pd.DataFrame(rows, columns=["example_id", "ranking", "curve", "fraction", "n_tokens", "prob"])
    out = aopc(curves, [0.1, 0.5]).iloc[0]
    assert out["comprehensiveness"] == pytest.approx(((0.9 - 0.6) + (0.9 - 0.3)) / 2)
    assert out["sufficiency"] == pytest.approx(((0.9 - 0.5) + (0.9 - 0.8)) / 2)


def test_plausibility_against_brute_force():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=40)
    labels = rng.random(40) < 0.3
    eligible = np.ones(40, dtype=bool)
    eligible[[0, 39]] = False
    out = plausibility(scores, labels, eligible, k=5)
    idx = np.flatnonzero(eligible)
    order = idx[np.argsort(-scores[idx], kind="stable")]
    hits = np.cumsum(labels[order])
    ap = sum(hits[r] / (r + 1) for r in range(len(order)) if labels[order[r]]) / labels[idx].sum()
    assert out["auprc"] == pytest.approx(ap)
    p = labels[order[:5]].sum() / 5
    r = labels[order[:5]].sum() / labels[idx].sum()
    assert out["precision"] == pytest.approx(p) and out["recall"] == pytest.approx(r)
    assert out["f1"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)
    assert np.isnan(plausibility(scores, np.zeros(40, bool), eligible, 5)["auprc"])


def test_evidence_labels_overlap():
    offsets = [(0, 0), (0, 4), (5, 9), (9, 12), (13, 15), (0, 0)]
    assert evidence_labels(offsets, [(5, 12)]).tolist() == [False, False, True, True, False, False]
    assert evidence_labels(offsets, [(3, 6)]).tolist() == [False, True, True, False, False, False]
