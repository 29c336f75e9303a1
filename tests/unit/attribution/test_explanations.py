"""Explanation methods against independent references (issue: explanations beyond raw attention).

The reference for every attention-based method is a *dense* re-implementation of Longformer's
self-attention, patched into the model: sliding window + global rows written as ``n × n`` masked
softmax matrices, kept in the graph so that ``∂F/∂A`` comes from autograd on the matrix itself.
It first has to reproduce the model's own logits; then raw attention, value-norm weighting (from the
dense matrices and explicit value vectors), rollout (a plain product of the dense matrices) and
gradient-weighted attention (``A ⊙ ∂F/∂A``) are computed from it and compared with the band code.
Gradient methods are checked against Captum's ``Saliency`` and ``InputXGradient``, occlusion against
Captum's ``FeatureAblation`` and a brute-force loop; each method also meets a toy whose answer is
known in closed form.

Bounds: the toy model is float64, but Longformer rounds its attention probabilities to float32 (its
softmax's ``dtype``) while the dense reference keeps them in float64: each probability is off by at most
2⁻²⁴ ≈ 6e-8 of itself, so a sum of positive weights is off by at most that fraction of the sum — inside
``assert_allclose``'s default ``rtol=1e-7`` (raw attention, rollout; measured 1e-7 absolute on sums ≲ 19).
Value norms and gradient-weighted attention multiply those weights by float64 vectors of either sign
(``rtol=1e-6`` / ``1e-7``). The logits pass through the same rounding damped by three layers and the
head (measured 2e-12 on logits ~7e-3: ``1e-9``). Captum's gradient methods and occlusion run the same
forward as ours: float64 rounding only (``rtol=1e-9``, ``atol=1e-12``–``1e-14``). The closed-form toys are
exact fractions in float64 (the defaults).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from captum.attr import FeatureAblation, InputXGradient, Saliency
from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

from attnlens.attention.band import Band, received_attention
from attnlens.attention.weighted import band_products, grad_attention_received, rollout, value_norm_received
from attnlens.attribution.engine import explain_document
from attnlens.attribution.explanations import EmbeddingForward, occlusion_scores, sentence_spans
from attnlens.attribution.ig import freeze, prepare_inputs
from attnlens.attribution.lrp import attnlrp
from attnlens.attribution.methods import method_names
from tests.support.tiny_models import tiny_longformer

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

# --- the dense reference ------------------------------------------------------------------------------


class DenseRecorder:
    """What the patched self-attention saw: per layer the dense matrices, hidden input and values."""

    def __init__(self):
        self.layers: list[dict] = []


def dense_self_attention(recorder: DenseRecorder):
    """A replacement for ``LongformerSelfAttention.forward`` computing dense ``n × n`` attention (batch 1)."""

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        is_index_masked=None,
        is_index_global_attn=None,
        is_global_attn=None,
        output_attentions=False,
    ):
        h = hidden_states[0]
        n, heads, dh, half = h.shape[0], self.num_heads, self.head_dim, self.one_sided_attn_window_size
        masked, glob = is_index_masked[0], is_index_global_attn[0]

        def split(t):
            return t.view(n, heads, dh).transpose(0, 1)

        q, k, v = split(self.query(h) / math.sqrt(dh)), split(self.key(h)), split(self.value(h))
        i = torch.arange(n)
        window = (i[:, None] - i[None, :]).abs() <= half
        allowed = ((window & ~glob[None, :]) | glob[None, :]) & ~masked[None, :]
        scores = (q @ k.transpose(1, 2)).masked_fill(~allowed, float("-inf"))
        local = torch.softmax(scores, -1).masked_fill(masked[None, :, None], 0.0)
        local.retain_grad() if local.requires_grad else None
        out = local @ v
        qg, kg, vg = split(self.query_global(h) / math.sqrt(dh)), split(self.key_global(h)), split(self.value_global(h))
        gscores = (qg[:, glob] @ kg.transpose(1, 2)).masked_fill(masked[None, None, :], float("-inf"))
        global_rows = torch.softmax(gscores, -1)
        global_rows.retain_grad() if global_rows.requires_grad else None
        out = out.clone()
        out[:, glob] = global_rows @ vg
        recorder.layers.append(
            {"local": local, "global": global_rows, "glob": glob, "masked": masked, "v": v.detach(), "vg": vg.detach()}
        )
        return (out.transpose(0, 1).reshape(1, n, heads * dh),)

    return forward


def dense_matrices(rec: dict, n: int, grad: bool = False) -> torch.Tensor:
    """``(heads, n, n)`` the layer's dense attention (global rows from the global softmax), or its gradient."""
    pick = (lambda t: t.grad) if grad else (lambda t: t.detach())
    dense = pick(rec["local"]).clone()
    dense[:, rec["glob"]] = pick(rec["global"])
    return dense[:, :n, :n].double()


@pytest.fixture()
def toy_model():
    model = tiny_longformer(
        vocab_size=40,
        hidden=16,
        layers=3,
        heads=4,
        intermediate=32,
        max_positions=80,
        window=4,
        num_labels=3,
        seed=3,
        double=True,
    )
    return freeze(model)


def toy_inputs(model, n=19, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 40, (n,), generator=g).tolist()
    ids[0], ids[-1] = 0, 2  # CLS-like and SEP-like

    tokenizer = type(
        "Tok",
        (),
        {
            "pad_token_id": 1,
            "cls_token_id": 0,
            "sep_token_id": 2,
            "__call__": lambda self, text, **kw: {"input_ids": [0, 2]},
        },
    )()
    return prepare_inputs(model, tokenizer, ids)


def dense_run(model, inputs, target, monkeypatch):
    recorder = DenseRecorder()
    monkeypatch.setattr(LongformerSelfAttention, "forward", dense_self_attention(recorder))
    with torch.enable_grad():
        for p in model.parameters():
            p.requires_grad_(True)  # the dense matrices must be in the graph
        logits = model(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            global_attention_mask=inputs.model_args["global_attention_mask"],
            position_ids=inputs.position_ids,
        ).logits
        torch.softmax(logits, -1)[0, target].backward()
    freeze(model)
    monkeypatch.undo()
    return recorder, logits.detach()


def test_dense_reference_reproduces_the_model(toy_model, monkeypatch):
    inputs = toy_inputs(toy_model)
    with torch.no_grad():
        expected = toy_model(
            input_ids=inputs.input_ids,
            attention_mask=inputs.attention_mask,
            global_attention_mask=inputs.model_args["global_attention_mask"],
            position_ids=inputs.position_ids,
        ).logits
    _, logits = dense_run(toy_model, inputs, 1, monkeypatch)
    torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-9)


def test_attention_methods_match_dense_references(toy_model, monkeypatch):
    inputs = toy_inputs(toy_model)
    n, target = inputs.input_ids.shape[1], 2
    got = explain_document(
        toy_model,
        inputs,
        target,
        ["attention_last", "attention_all", "value_norm", "rollout", "grad_attention"],
        layers="all",
    )
    recorder, _ = dense_run(toy_model, inputs, target, monkeypatch)
    dense = [dense_matrices(r, n) for r in recorder.layers]
    grads = [dense_matrices(r, n, grad=True) for r in recorder.layers]
    np.testing.assert_allclose(got.scores["attention_last"], dense[-1].sum((0, 1)).numpy(), atol=1e-10)
    np.testing.assert_allclose(got.scores["attention_all"], sum(d.sum((0, 1)) for d in dense).numpy(), atol=1e-10)
    # rollout: the CLS row of the plain product of (A_l averaged over heads + I) / 2, top layer first
    product = torch.eye(n, dtype=torch.float64)
    for d in dense:
        product = (0.5 * d.mean(0) + 0.5 * torch.eye(n, dtype=torch.float64)) @ product
    np.testing.assert_allclose(got.scores["rollout"], product[0].numpy(), atol=1e-12)
    # value norm: Σ_i ‖A_ij f(x_j)‖ with explicit transformed value vectors, per head (global rows: value_global)
    heads = toy_model.config.num_attention_heads
    expected_vn = torch.zeros(n, dtype=torch.float64)
    for layer, rec, d in zip(toy_model.longformer.encoder.layer, recorder.layers, dense, strict=True):
        w_o = layer.attention.output.dense.weight.double()
        dh = w_o.shape[1] // heads
        for h in range(heads):
            cols = slice(h * dh, (h + 1) * dh)
            f_local = rec["v"][h, :n].double() @ w_o[:, cols].T  # (n, d)
            f_global = rec["vg"][h, :n].double() @ w_o[:, cols].T
            f = torch.where(rec["glob"][:n, None, None], f_global[None], f_local[None])  # (query, key, d)
            expected_vn += torch.linalg.vector_norm(d[h][:, :, None] * f, dim=-1).sum(0)
    # rtol 1e-6: Longformer computes its softmax in float32 even in a float64 model; value vectors of either sign
    np.testing.assert_allclose(got.scores["value_norm"], expected_vn.numpy(), rtol=1e-6, atol=1e-12)
    # gradient-weighted attention: A ⊙ ∂F/∂A from autograd on the dense matrices
    expected_ga = sum((d * g).sum((0, 1)) for d, g in zip(dense, grads, strict=True))
    np.testing.assert_allclose(got.scores["grad_attention"], expected_ga.numpy(), rtol=1e-7, atol=1e-12)


def test_gradient_methods_match_captum(toy_model, monkeypatch):
    """Saliency and gradient × input, read from one gradient of the shared pass (one forward of ``F(e)``, so one
    backward), equal Captum's ``Saliency`` and ``InputXGradient``, each run on its own."""
    inputs = toy_inputs(toy_model, n=24, seed=4)  # a multiple of the window: the model adds no padding
    n, target = inputs.input_ids.shape[1], 1
    calls = []
    forward_of_e = EmbeddingForward.forward
    monkeypatch.setattr(EmbeddingForward, "forward", lambda self, e: calls.append(e.shape) or forward_of_e(self, e))
    got = explain_document(toy_model, inputs, target, ["saliency", "grad_input"])
    assert len(calls) == 1
    monkeypatch.undo()
    emb = toy_model.longformer.embeddings
    with torch.no_grad():
        e0 = emb(input_ids=inputs.input_ids, position_ids=inputs.position_ids)

    def forward(e):
        handle = emb.register_forward_hook(lambda module, args, output: e)
        try:
            logits = toy_model(
                input_ids=inputs.input_ids,
                attention_mask=inputs.attention_mask,
                global_attention_mask=inputs.model_args["global_attention_mask"],
                position_ids=inputs.position_ids,
            ).logits
        finally:
            handle.remove()
        return torch.softmax(logits, -1)

    sal = Saliency(forward).attribute(e0.clone().requires_grad_(), target=target, abs=True)[0].sum(-1)
    ixg = InputXGradient(forward).attribute(e0.clone().requires_grad_(), target=target)[0].sum(-1)
    np.testing.assert_allclose(got.scores["saliency"], sal[:n].detach().numpy(), rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(got.scores["grad_input"], ixg[:n].detach().numpy(), rtol=1e-9, atol=1e-14)
    # toy: grad×input of token j is the derivative of F when e_j alone is scaled by α, at α = 1
    j = int(np.argmax(np.abs(got.scores["grad_input"])))
    eps = 1e-3

    def scaled(alpha):
        e = e0.clone()
        e[0, j] *= alpha
        return float(forward(e)[0, target])

    with torch.no_grad():
        slope = (scaled(1 + eps) - scaled(1 - eps)) / (2 * eps)
    assert float(got.scores["grad_input"][j]) == pytest.approx(slope, rel=1e-3)


def test_occlusion_matches_captum_brute_force_and_a_toy(toy_model):
    inputs = toy_inputs(toy_model, n=30, seed=5)
    ids = inputs.input_ids[0].tolist()
    tokens = ["w"] * len(ids)
    for i in (5, 11, 12, 20):
        tokens[i] = "."
    special = np.zeros(len(ids), dtype=bool)
    special[[0, len(ids) - 1]] = True
    spans = sentence_spans(tokens, special, max_tokens=4)
    # a 5-token sentence is cut; two short sentences are packed into one span of at most 4
    assert [s.tolist() for s in spans][:4] == [[1, 2, 3, 4], [5], [6, 7, 8, 9], [10, 11, 12]]
    assert sorted(np.concatenate(spans).tolist()) == list(range(1, len(ids) - 1))
    target = 0
    got = explain_document(
        toy_model,
        inputs,
        target,
        ["occlusion"],
        tokens=tokens,
        special=special,
        pad_id=1,
        occlusion_max_tokens=4,
        batch_size=3,
    )

    def probs(batch_ids):
        b = batch_ids.shape[0]
        logits = toy_model(
            input_ids=batch_ids,
            attention_mask=inputs.attention_mask.expand(b, -1),
            global_attention_mask=inputs.model_args["global_attention_mask"].expand(b, -1),
            position_ids=inputs.position_ids.expand(b, -1),
        ).logits
        return torch.softmax(logits, -1)

    # brute force: one occluded copy at a time
    with torch.no_grad():
        full = float(probs(inputs.input_ids)[0, target])
        brute = np.zeros(len(ids))
        for span in spans:
            x = inputs.input_ids.clone()
            x[0, span] = 1
            brute[span] = full - float(probs(x)[0, target])
    np.testing.assert_allclose(got.scores["occlusion"], brute, atol=1e-12)
    # Captum: one feature group per span, specials in groups of their own (ignored)
    mask = torch.zeros_like(inputs.input_ids)
    for g, span in enumerate(spans):
        mask[0, span] = g
    mask[0, 0], mask[0, -1] = len(spans), len(spans) + 1
    captum = FeatureAblation(probs).attribute(inputs.input_ids, baselines=1, target=target, feature_mask=mask)
    np.testing.assert_allclose(got.scores["occlusion"][~special], captum[0].double().numpy()[~special], atol=1e-12)
    assert got.n_forwards["occlusion"] == len(spans) + 1


def test_occlusion_toy_counts_the_evidence_token():
    """A 'model' whose class-1 probability is the share of token 7: a span scores its own share."""
    ids = torch.tensor([0, 7, 3, 7, 4, 5, 7, 2])
    n = len(ids)

    def prob_fn(batch):
        p1 = (batch == 7).double().sum(1, keepdim=True) / n
        return torch.cat([1 - p1, p1], 1)

    spans = [np.array([1, 2]), np.array([3, 4, 5]), np.array([6])]
    got = occlusion_scores(prob_fn, ids, spans, fill_id=1, target=1, batch_size=2)
    np.testing.assert_allclose(got, [0, 1 / n, 1 / n, 1 / n, 1 / n, 1 / n, 1 / n, 0])


# --- band-level toys ----------------------------------------------------------------------------------


def test_band_products_against_a_loop():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 37, 5, generator=g, dtype=torch.float64)
    k = torch.randn(3, 37, 5, generator=g, dtype=torch.float64)
    for half in (1, 2, 8, 40):
        got = band_products(q, k, half)
        want = torch.zeros_like(got)
        for i in range(37):
            for s in range(2 * half + 1):
                j = i + s - half
                if 0 <= j < 37:
                    want[:, i, s] = (q[:, i] * k[:, j]).sum(-1)
        torch.testing.assert_close(got, want)


def _uniform_band(n=10, window=4, heads=2):
    """CLS (position 0) global and attending uniformly; every other query attends only itself."""
    half = window // 2
    local = torch.zeros(heads, n, 1 + window + 1, dtype=torch.float64)
    local[:, 1:, 1 + half] = 1.0  # the window slot of the query itself
    glob = torch.zeros(heads, n + window, 1, dtype=torch.float64)
    glob[:, :n, 0] = 1.0 / n
    return Band(local, glob, n, torch.tensor([0]))


def test_rollout_toy_closed_form_and_mass():
    band = _uniform_band()
    r = rollout([band]).numpy()
    want = np.full(10, 0.5 / 10)
    want[0] += 0.5
    np.testing.assert_allclose(r, want)
    # two layers: the identity rows keep what they hold, CLS spreads its half again
    r2 = rollout([band, band]).numpy()
    want2 = 0.5 * want + 0.5 * (want[0] * np.full(10, 0.1) + np.r_[0.0, want[1:]])
    np.testing.assert_allclose(r2, want2)
    assert r2.sum() == pytest.approx(1.0)


def test_value_norm_with_unit_norms_is_received_attention():
    band = _uniform_band()
    ones = torch.ones(2, 10, dtype=torch.float64)
    torch.testing.assert_close(value_norm_received(band, ones, ones), received_attention(band))
    twice = value_norm_received(band, ones, 2 * ones)  # global rows weighted twice
    torch.testing.assert_close(twice[:, 1:], received_attention(band)[:, 1:] + 0.1)


def test_grad_attention_toy_only_the_cls_gradient():
    """With ∂F/∂o zero except at CLS, the score of key j is A_0j ⟨g_0, v^global_j⟩."""
    band = _uniform_band()
    g = torch.zeros(2, 14, 3, dtype=torch.float64)
    g[:, 0] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    v = torch.randn(2, 14, 3, dtype=torch.float64)
    vg = torch.randn(2, 14, 3, dtype=torch.float64)
    got = grad_attention_received(band, g, v, vg)
    want = 0.1 * (vg[:, :10] * g[:, :1]).sum(-1)
    torch.testing.assert_close(got, want)


def test_every_method_on_a_real_classifier(tiny_classifier):
    model, tokenizer = tiny_classifier
    freeze(model)
    ids = tokenizer("The method works. It is fast! Is it faithful? Yes.")["input_ids"]
    inputs = prepare_inputs(model, tokenizer, ids)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = np.array([i in tokenizer.all_special_ids for i in ids])
    got = explain_document(
        model, inputs, 1, method_names(), tokens=tokens, special=special, pad_id=tokenizer.pad_token_id
    )
    assert set(got.scores) == set(method_names())
    for method, scores in got.scores.items():
        assert scores.shape == (len(ids),) and np.isfinite(scores).all(), method
        assert got.seconds[method] > 0 and got.forward_seconds > 0
    assert got.scores["rollout"].sum() == pytest.approx(1.0)
    assert (got.scores["occlusion"][special] == 0).all()
    lrp = attnlrp(model, inputs, 1)  # AttnLRP keeps the explained logit and its δ (test_attnlrp.py)
    np.testing.assert_array_equal(got.scores["attnlrp"], lrp.scores)
    assert got.delta == {"attnlrp": lrp.delta} and got.explained == {"attnlrp": lrp.explained}
    assert got.n_forwards["attnlrp"] == 1
    assert len(sentence_spans(tokens, special, 5)) == 4  # four sentences of 2-5 tokens, none packable
    assert len(sentence_spans(tokens, special, 48)) == 1
