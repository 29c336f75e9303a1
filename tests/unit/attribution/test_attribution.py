"""IG attributions: closed-form toy model, parity with plain Captum, completeness, adaptive steps, resume."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from captum.attr import LayerIntegratedGradients

from attnlens.attribution import ig
from attnlens.attribution.artifacts import l2_normalise
from attnlens.attribution.ig import (
    ReadoutForward,
    attribute_example,
    baseline_ids,
    embedding_ig,
    freeze,
    integrate,
    layer_ig,
    prepare_inputs,
    step_range,
)
from attnlens.tasks import CLASSIFICATION

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


class Tokens(torch.nn.Module):
    """``(1, 2)`` → ``(1, 2, 1)``: two "tokens" with hidden size 1, so a token score is the feature's."""

    def forward(self, x):
        return x[..., None]


class BasicModel2(torch.nn.Module):
    """The IG paper's example ``f(x1, x2) = ReLU(ReLU(x1) − 1 − ReLU(x2))`` (Sundararajan et al., 2017)."""

    def __init__(self):
        super().__init__()
        self.tokens = Tokens()

    def forward(self, x):
        t = self.tokens(x)[..., 0]
        relu = torch.nn.functional.relu
        return relu(relu(t[:, :1]) - 1 - relu(t[:, 1:]))


def test_toy_model_closed_form():
    """From (0, 0) to (3, 1) the attributions are (1.5, −0.5) (captum's BasicModel2 reference)."""
    model = BasicModel2()
    x = torch.tensor([[3.0, 1.0]], dtype=torch.float64)
    res = integrate(
        model,
        model.tokens,
        x,
        torch.zeros_like(x),
        (),
        0,
        min_steps=2,
        max_steps=512,
        tolerance=1e-3,
        internal_batch_size=64,
    )
    # the integrand has a kink, so Gauss-Legendre converges slowly: 1e-2 is what 512 nodes give
    np.testing.assert_allclose(res.scores, [1.5, -0.5], atol=1e-2)
    assert res.gap == pytest.approx(1.0)  # F(x) − F(x′) = relu(3 − 1 − 1) − 0, float64: approx's 1e-6 relative
    assert abs(res.delta) <= 1e-3 * res.gap and res.converged


def _smooth_model():
    class Smooth(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = Tokens()

        def forward(self, x):
            t = self.tokens(x)[..., 0]
            z = torch.stack([t.sum(-1) * 0, torch.sin(3 * t[:, 0]) * t[:, 1] ** 2 + torch.tanh(4 * t[:, 1])], -1)
            return torch.softmax(z, -1)

    return Smooth()


def test_adaptive_steps_stop_at_the_tolerance():
    model = _smooth_model()
    x = torch.tensor([[2.0, 1.5]], dtype=torch.float64)
    base = torch.zeros_like(x)
    res = integrate(
        model, model.tokens, x, base, (), 1, min_steps=1, max_steps=256, tolerance=1e-4, internal_batch_size=8
    )
    steps = [s for s, _ in res.rounds]
    assert steps == [2**i for i in range(len(steps))] and res.n_steps == steps[-1]
    assert res.converged and abs(res.rounds[-1][1]) <= 1e-4 * abs(res.gap)
    assert all(abs(d) > 1e-4 * abs(res.gap) for _, d in res.rounds[:-1])  # stopped at the first success
    assert len(steps) > 2
    capped = integrate(
        model, model.tokens, x, base, (), 1, min_steps=1, max_steps=2, tolerance=1e-4, internal_batch_size=8
    )
    assert not capped.converged and capped.n_steps == 2
    assert capped.delta == pytest.approx(capped.scores.sum() - capped.gap)  # δ's definition, float64 rounding


def _example(tiny_classifier):
    model, tokenizer = tiny_classifier
    model = model.double()
    ids = tokenizer("integrated gradients on a tiny longformer with a window")["input_ids"]
    return model, tokenizer, prepare_inputs(model, tokenizer, ids)


def test_baseline_keeps_special_tokens(tiny_classifier):
    _, tokenizer, inputs = _example(tiny_classifier)
    ids, base = inputs.input_ids[0], inputs.baseline[0]
    assert base[0] == tokenizer.cls_token_id and base[-1] == tokenizer.sep_token_id
    assert (base[1:-1] == tokenizer.pad_token_id).all() and (ids[1:-1] != tokenizer.pad_token_id).all()
    assert inputs.position_ids[0, 0] == tokenizer.pad_token_id + 1  # explicit: the baseline pads are not padding
    assert baseline_ids(torch.tensor([[5, 6]]), {5}, 0).tolist() == [[5, 0]]


def test_wrapper_equals_plain_captum_and_completeness(tiny_classifier):
    """Our scores and δ equal Captum's own LayerIntegratedGradients (its convergence delta included)."""

    model, _, inputs = _example(tiny_classifier)
    ours = attribute_example(model, inputs, 1, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=16)

    def f(ids, mask, pos, gmask):
        return torch.softmax(
            model(input_ids=ids, attention_mask=mask, global_attention_mask=gmask, position_ids=pos).logits, -1
        )

    attr, delta = LayerIntegratedGradients(f, model.longformer.embeddings).attribute(
        inputs.input_ids,
        baselines=inputs.baseline,
        additional_forward_args=inputs.forward_args,
        target=1,
        n_steps=64,
        method="gausslegendre",
        internal_batch_size=16,
        return_convergence_delta=True,
    )
    n = inputs.input_ids.shape[1]
    plain = attr[0].sum(-1).numpy()
    assert np.all(plain[n:] == 0)  # Longformer's internal window padding carries no attribution
    # float64 model, the same 64 Gauss–Legendre points in batches of 16 through the same forward: what may differ
    # is the order of the sums over points and over the embedding width, i.e. float64 rounding of scores ≲ 1
    np.testing.assert_allclose(ours.scores, plain[:n], rtol=1e-10, atol=1e-12)
    assert ours.delta == pytest.approx(float(delta), abs=1e-10)
    # completeness, within the δ we report: δ is defined as Σ scores − gap, so only float64 rounding remains
    assert ours.scores.sum() == pytest.approx(ours.gap + ours.delta, abs=1e-12)
    assert abs(ours.delta) < 1e-3 * abs(ours.gap)
    assert ours.scores[0] == 0 and ours.scores[-1] == 0  # CLS and SEP are identical in input and baseline


def test_layer_ig_is_a_plain_captum_call(tiny_classifier):
    """Float32, uneven step batches (20 steps by 8), one layer and two sibling layers: a plain Captum call's bits."""
    model, tokenizer = tiny_classifier
    model = freeze(copy.deepcopy(model).float())
    ids = tokenizer("layer integrated gradients without the two extra forwards")["input_ids"]
    inputs = prepare_inputs(model, tokenizer, ids)
    forward = ReadoutForward(model, ["global_attention_mask"])
    (ours,) = layer_ig(
        forward, model.longformer.embeddings, inputs.input_ids, inputs.baseline, inputs.forward_args, 1, 20, 8
    )
    theirs = LayerIntegratedGradients(forward, model.longformer.embeddings).attribute(
        inputs.input_ids,
        baselines=inputs.baseline,
        additional_forward_args=inputs.forward_args,
        target=1,
        n_steps=20,
        method="gausslegendre",
        internal_batch_size=8,
    )
    # the arguments reach Captum as a user would pass them
    assert ours.dtype == torch.float32 and torch.equal(ours, theirs)

    emb = model.longformer.embeddings
    layers = [emb.word_embeddings, emb.position_embeddings]
    pos = torch.full_like(inputs.position_ids, model.config.pad_token_id)

    def f(ids, positions, mask, gmask):
        return forward(ids, mask, positions, gmask)

    gmask = inputs.model_args["global_attention_mask"]
    ours = layer_ig(
        f,
        layers,
        (inputs.input_ids, inputs.position_ids),
        (inputs.baseline, pos),
        (inputs.attention_mask, gmask),
        0,
        12,
        5,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Multiple layers provided", category=UserWarning)
        lig = LayerIntegratedGradients(f, layers)
    theirs = lig.attribute(
        (inputs.input_ids, inputs.position_ids),
        baselines=(inputs.baseline, pos),
        additional_forward_args=(inputs.attention_mask, gmask),
        target=0,
        n_steps=12,
        method="gausslegendre",
        internal_batch_size=5,
    )
    assert len(ours) == 2 and all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_embedding_attributions_bound_by_name(tiny_classifier):
    model, _, inputs = _example(tiny_classifier)
    fixed = embedding_ig(model, inputs, 1, n_steps=64, internal_batch_size=16, mode="fixed")
    assert set(fixed) == {"word", "position", "delta", "gap"}
    assert abs(fixed["delta"]) < 1e-3 * abs(fixed["gap"])  # completeness of the sum over layers
    legacy = embedding_ig(model, inputs, 1, n_steps=64, internal_batch_size=16, mode="legacy")
    assert set(legacy) == {"word", "position", "token_type", "delta", "gap"}
    assert np.all(legacy["token_type"] == 0)  # constant input: zero, not NaN
    assert not np.allclose(legacy["position"], 0)  # B-14: the position result is where its name says


def test_choose_target_and_l2():
    probs = np.array([0.3, 0.7])
    assert CLASSIFICATION.targets("class_1", 0, probs) == (1,)
    assert CLASSIFICATION.targets("predicted", 0, probs) == (1,)
    assert CLASSIFICATION.targets("true", 0, probs) == (0,)
    with pytest.raises(ValueError):
        CLASSIFICATION.targets("other", 0, probs)
    np.testing.assert_allclose(l2_normalise(np.array([3.0, -4.0])), [0.6, -0.8])  # one float64 division (1e-7)
    assert np.all(l2_normalise(np.zeros(3)) == 0)


def test_step_range_is_the_step_policy():
    """Showcased examples get showcase_steps when set; otherwise the adaptive range, or n_steps for all."""
    policy = {"showcase_steps": 500, "adaptive": True, "min_steps": 16, "max_steps": 32, "n_steps": 50}
    assert step_range(True, **policy) == (500, 500)
    assert step_range(False, **policy) == (16, 32)
    assert step_range(True, **{**policy, "showcase_steps": None}) == (16, 32)
    assert step_range(False, **{**policy, "adaptive": False}) == (50, 50)


def test_steps_in_bfloat16_keep_float32_end_points_and_the_same_delta_check(tiny_classifier, monkeypatch):
    """IG's steps under bfloat16 autocast (``attribution.autocast: bf16`` or ``auto`` on a card that has it; forced
    here on the CPU, whose autocast has bfloat16): the end points ``F(x)``, ``F(x′)`` are float32's, bit for bit; the
    scores are a bfloat16 rounding of float32's (8 significant bits: 2⁻⁸ per rounding, a few in series through two
    layers, so within 2⁻⁵ of the largest score; measured 1e-2) and not float32's themselves; δ is
    ``Σ scores − gap`` and the tolerance decides ``converged`` as it does in float32, doubling the steps until then."""
    model, tokenizer = tiny_classifier
    model = copy.deepcopy(model)
    with torch.no_grad():
        model.classifier.out_proj.weight.mul_(100)  # a random classifier's readout, sharpened: a gap of 2e-4
    inputs = prepare_inputs(model, tokenizer, tokenizer("integrated gradients on a tiny longformer")["input_ids"])
    float32 = attribute_example(model, inputs, 0, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=16)
    monkeypatch.setattr(ig, "autocast_dtype", lambda device, precision: torch.bfloat16)
    half = attribute_example(
        model, inputs, 0, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=16, autocast="bf16"
    )
    np.testing.assert_array_equal(half.probs, float32.probs)
    np.testing.assert_array_equal(half.probs_baseline, float32.probs_baseline)
    scale = np.abs(float32.scores).max()
    assert 0 < np.abs(half.scores - float32.scores).max() <= 2**-5 * scale
    assert half.delta == pytest.approx(half.scores.sum() - half.gap, abs=1e-12)
    tolerance = 0.5 * abs(half.delta) / abs(half.gap)  # a tolerance the bfloat16 steps miss at 64 steps
    checked = attribute_example(
        model, inputs, 0, min_steps=16, max_steps=64, tolerance=tolerance, internal_batch_size=16, autocast="bf16"
    )
    assert [s for s, _ in checked.rounds] == [16, 32, 64] and not checked.converged  # δ stays at bfloat16's floor
    for steps, delta in checked.rounds:
        assert (abs(delta) <= tolerance * abs(checked.gap)) == (steps == checked.n_steps and checked.converged)
