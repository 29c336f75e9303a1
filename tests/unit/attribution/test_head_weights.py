"""Learned attention (:mod:`attnlens.attribution.head_weights`): AT2's features as sums of the answer rows' attention,
equal to at2 0.0.1's own where its definition is the model's (tests/reference/at2), its objective against scipy's
Pearson correlation, and its fit on ablations whose scores a known set of head weights made.

Bounds: the correlation is float64 in both, with AT2's 1e-8 in the denominator, so the two agree to about 1e-8
relative (a correlation near 1 over deviations of order 1). The fit's recovery bound (cosine 0.99) holds with
margin: on noiseless-but-for-1 % scores the held-out correlation reaches 0.999.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from scipy.stats import pearsonr

from attnlens.attribution.datamodels import ablation_masks
from attnlens.attribution.head_weights import FitExample, fit_head_weights, learned_scores, pearson, source_features
from attnlens.attribution.source_scores import answer_head_attention
from tests.support.helpers import ROOT


def test_the_correlation_is_scipys_and_zero_for_a_constant_row():
    rng = np.random.default_rng(0)
    p, t = rng.normal(size=(5, 32)), rng.normal(size=(5, 32))
    t[1] = 0.3 * p[1] + rng.normal(scale=0.1, size=32)
    got = pearson(torch.as_tensor(p), torch.as_tensor(t)).numpy()
    expected = [pearsonr(a, b).statistic for a, b in zip(p, t, strict=True)]
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=0)
    assert float(pearson(torch.as_tensor(p[:1]), torch.zeros(1, 32))[0]) == 0.0  # AT2's guard: no NaN


def test_features_sum_each_sources_tokens_per_layer_and_head():
    rng = np.random.default_rng(1)
    rows = rng.random((2, 3, 9))
    owner = np.array([-1, 0, 0, 1, 1, 1, 2, -1, -1])
    got = source_features(rows, owner, 4)
    assert got.shape == (4, 6)
    for layer in range(2):
        for head in range(3):
            for s in range(4):
                assert got[s, layer * 3 + head] == pytest.approx(rows[layer, head, owner == s].sum(), abs=1e-12)
    w = rng.normal(size=(2, 3))
    np.testing.assert_allclose(learned_scores(got, w), got @ w.reshape(-1), rtol=0, atol=1e-12)


def _examples(true_w: np.ndarray, n: int, seed: int) -> list[FitExample]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        sources = int(rng.integers(4, 12))
        features = rng.exponential(size=(sources, true_w.size))
        masks = ablation_masks(sources, 32, seed=100 * k)
        clean = masks.astype(float) @ features @ true_w
        out.append(FitExample(features, masks, clean + rng.normal(scale=0.01 * clean.std() + 1e-9, size=32)))
    return out


def test_the_fit_recovers_the_head_weights_that_made_the_scores():
    true_w = np.array([2.0, 0.0, -1.0, 0.5, 0.0, 1.5])
    fit = fit_head_weights(_examples(true_w, 24, seed=3), layers=2, heads=3, steps=400, learning_rate=0.05)
    assert fit.weights.shape == (2, 3) and np.abs(fit.weights).sum() == pytest.approx(1.0)
    w = fit.weights.reshape(-1)
    cosine = w @ true_w / np.linalg.norm(w) / np.linalg.norm(true_w)
    assert cosine > 0.99
    assert fit.n_fit == 18 and fit.heldout_correlation > 0.99 > fit.uniform_heldout_correlation
    assert fit.losses[-1] < fit.losses[0]


def test_bad_fits_are_refused():
    with pytest.raises(ValueError, match="got none"):
        fit_head_weights([], 1, 1)
    a, b = _examples(np.ones(2), 2, seed=0)
    with pytest.raises(ValueError, match="same number of ablations"):
        fit_head_weights([a, FitExample(b.features, b.masks[:8], b.scores[:8])], 1, 2)
    with pytest.raises(ValueError, match="features a source"):
        fit_head_weights([a, b], 1, 3)


AT2 = ROOT / "tests" / "reference" / "at2"


def _ours(case: dict) -> np.ndarray:
    model = transformers.AutoModelForCausalLM.from_pretrained(AT2 / case["case"], dtype=torch.float64).eval()
    ids = torch.tensor([case["input_ids"]])
    owner = np.full(ids.shape[1], -1)
    for s, (a, b) in enumerate(case["sources"]):
        owner[a:b] = s
    rows = answer_head_attention(model, ids, case["answer_length"])
    return source_features(rows, owner, len(case["sources"]))


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma3_wide"])
def test_the_features_are_at2s_where_its_definition_is_the_models(name):
    """at2 0.0.1's own feature extractor, committed (tests/reference/at2_reference.py): its softmax runs in float32
    (1e-6 relative, 1e-9 absolute, as the eager weights are bounded)."""
    case = next(c for c in json.loads((AT2 / "cases.json").read_text())["cases"] if c["case"] == name)
    np.testing.assert_allclose(_ours(case), np.array(case["features"]), rtol=1e-6, atol=1e-9)


def test_past_gemma_3s_window_at2s_full_causal_mask_is_not_the_model():
    """A window of 8 keys on 40 tokens: at2 lets the local layer's rows attend past the window, the model does not
    (attnlens's rows equal the model's eager weights: test_source_scores.py). The features differ by far more than the
    float32 bound, in the local layer's heads only."""
    case = next(c for c in json.loads((AT2 / "cases.json").read_text())["cases"] if c["case"] == "gemma3_window")
    ours, theirs = _ours(case), np.array(case["features"])
    heads = ours.shape[1] // 2
    np.testing.assert_allclose(ours[:, heads:], theirs[:, heads:], rtol=1e-6, atol=1e-9)  # the global layer
    assert np.abs(ours[:, :heads] - theirs[:, :heads]).max() > 0.05
