"""Taylor head importance: finite differences of the loss w.r.t. a head mask, and the legacy recipe.

A head mask ``m[l, h]`` multiplying head ``h``'s context before the attention output dense layer
(Michel et al. 2019) is implemented here with forward pre-hooks, independently of the estimator.
``∂loss/∂m`` at ``m = 1`` must equal the estimator's ``Σ g·θ`` over the output-dense columns of the
head, and also over its local + global value rows: checked against central finite differences on a
float64 model. The legacy matrix is checked against a direct re-statement of recipes §4.

Bounds: a central difference with step ε = 1e-6 has truncation error O(ε²·f‴) ≈ 1e-12 and rounding error
≈ eps64·|loss|/ε ≈ 2e-10, both far below ``rtol=1e-6`` of derivatives above 1e-6 (``atol=1e-10``). The
re-statements use the same float64 gradients summed in another order (``rtol=1e-9``), and the
normalisations are one division of float64 numbers (``allclose``'s defaults, 1e-5 relative). ``equal``
only where the operations are the same.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.classifier.importance import (
    estimate_head_importance,
    head_labels,
    importance_matrices,
    normalise,
    taylor_terms,
    zero_heads,
)
from attnlens.models.longformer import LONGFORMER
from tests.support.tiny_models import tiny_longformer

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

N_LAYERS, N_HEADS, HIDDEN = 2, 3, 12


def tiny_model():
    model = tiny_longformer(
        vocab_size=40,
        hidden=HIDDEN,
        layers=N_LAYERS,
        heads=N_HEADS,
        intermediate=20,
        max_positions=40,
        window=4,
        num_labels=2,
        seed=5,
        double=True,
    )
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # break the symmetric init so every head matters
    return model


def batch(seed, n=11, label=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (1, n), generator=g)
    mask = torch.ones_like(ids)
    gmask = torch.zeros_like(ids)
    gmask[0, [0, 6]] = 1  # CLS and one more global token
    return {"input_ids": ids, "attention_mask": mask, "global_attention_mask": gmask, "labels": torch.tensor([label])}


def loss_with_head_mask(model, inputs, mask: torch.Tensor) -> float:
    hooks = []
    for layer, block in enumerate(model.longformer.encoder.layer):

        def scale(_module, args, layer=layer):
            (hidden,) = args
            factor = mask[layer].repeat_interleave(HIDDEN // N_HEADS).to(hidden.dtype)
            return (hidden * factor,)

        hooks.append(block.attention.output.dense.register_forward_pre_hook(scale))
    try:
        with torch.no_grad():
            return float(model(**inputs).loss)
    finally:
        for h in hooks:
            h.remove()


@pytest.fixture()
def float64_softmax(monkeypatch):
    """Longformer computes its softmax in float32 even for a float64 model; finite differences with a
    small step need the whole function in float64, so the test lifts that cast."""
    original = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        return original(x, dim=dim, dtype=torch.float64 if x.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", softmax)


def test_taylor_terms_equal_head_mask_finite_differences(float64_softmax):
    model = tiny_model()
    inputs = batch(0)
    model.zero_grad()
    model(**inputs).loss.backward()
    terms = taylor_terms(model, N_HEADS)
    eps = 1e-6
    fd = torch.zeros(N_LAYERS, N_HEADS, dtype=torch.float64)
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            up = torch.ones(N_LAYERS, N_HEADS, dtype=torch.float64)
            down = up.clone()
            up[layer, head] += eps
            down[layer, head] -= eps
            fd[layer, head] = (loss_with_head_mask(model, inputs, up) - loss_with_head_mask(model, inputs, down)) / (
                2 * eps
            )
    assert fd.abs().min() > 1e-6  # every head moves the loss: the comparison is not vacuous
    assert torch.allclose(terms["output"][1], fd, rtol=1e-6, atol=1e-10)
    value = terms["value"][1] + terms["value_global"][1]
    assert torch.allclose(value, fd, rtol=1e-6, atol=1e-10)
    # the global projections matter: without them the value group misses part of the derivative
    assert not torch.allclose(terms["value"][1], fd, rtol=1e-3)


def test_last_layer_local_qkv_gradients_are_zero_for_a_cls_classifier():
    """Only CLS feeds the classifier, and its last-layer output uses only global projections (B-3)."""
    model = tiny_model()
    inputs = batch(1)
    inputs["global_attention_mask"] = torch.zeros_like(inputs["input_ids"])
    inputs["global_attention_mask"][0, 0] = 1
    model.zero_grad()
    model(**inputs).loss.backward()
    last = model.longformer.encoder.layer[-1].attention.self
    for proj in ("query", "key", "value"):
        assert torch.count_nonzero(getattr(last, proj).weight.grad) == 0
    assert torch.count_nonzero(last.query_global.weight.grad) > 0


def test_estimator_matches_direct_restatement():
    model = tiny_model()
    examples = [batch(s, label=s % 2) for s in range(4)]
    raw = estimate_head_importance(model, iter(examples), "elementwise")
    assert int(raw["n_examples"]) == 4

    def head_rows(t, h):
        d = HIDDEN // N_HEADS
        return t[h * d : (h + 1) * d]

    # legacy: gradients summed over examples (never zeroed), squared products, local groups
    model.zero_grad()
    for b in examples:
        model(**b).loss.backward()
    legacy = torch.zeros(N_LAYERS, N_HEADS, dtype=torch.float64)
    fixed_local = torch.zeros_like(legacy)
    fixed_global = torch.zeros_like(legacy)
    for layer, block in enumerate(model.longformer.encoder.layer):
        att, out = block.attention.self, block.attention.output.dense
        for h in range(N_HEADS):
            total = 0.0
            for proj in ("query", "key", "value"):
                lin = getattr(att, proj)
                total += (head_rows(lin.weight.grad * lin.weight, h) ** 2).sum()
                total += (head_rows(lin.bias.grad * lin.bias, h) ** 2).sum()
            total += ((out.weight.grad * out.weight)[:, h * 4 : (h + 1) * 4] ** 2).sum()
            legacy[layer, h] = total
    assert torch.allclose(raw["legacy_raw"], legacy, rtol=1e-9)
    # fixed: per-example squared products summed over examples, local and global groups
    for b in examples:
        model.zero_grad()
        model(**b).loss.backward()
        for layer, block in enumerate(model.longformer.encoder.layer):
            att, out = block.attention.self, block.attention.output.dense
            for h in range(N_HEADS):
                for proj in ("query", "key", "value", "query_global", "key_global", "value_global"):
                    lin = getattr(att, proj)
                    s = (head_rows(lin.weight.grad * lin.weight, h) ** 2).sum()
                    s += (head_rows(lin.bias.grad * lin.bias, h) ** 2).sum()
                    if proj.endswith("global"):
                        fixed_global[layer, h] += s
                    else:
                        fixed_local[layer, h] += s
                fixed_local[layer, h] += ((out.weight.grad * out.weight)[:, h * 4 : (h + 1) * 4] ** 2).sum()
    assert torch.allclose(raw["fixed_local"], fixed_local, rtol=1e-9)
    assert torch.allclose(raw["fixed_global"], fixed_global, rtol=1e-9)
    assert torch.allclose(raw["fixed_raw"], fixed_local + fixed_global, rtol=1e-9)
    # summing gradients before squaring (legacy) is not the per-example estimator
    assert not torch.allclose(raw["legacy_raw"], raw["fixed_local"], rtol=1e-3)
    # plain numbers: the running sums keep no autograd graph (each example's would stay alive to the end)
    assert not any(v.requires_grad or v.grad_fn is not None for v in raw.values())


def test_group_estimator_squares_the_summed_term():
    model = tiny_model()
    b = batch(3)
    raw = estimate_head_importance(model, iter([b]), "group")
    model.zero_grad()
    model(**b).loss.backward()
    terms = taylor_terms(model, N_HEADS)
    loc = sum(terms[g][1] for g in LONGFORMER.local_groups)
    glo = sum(terms[g][1] for g in LONGFORMER.global_groups)
    assert torch.allclose(raw["fixed_raw"], (loc + glo) ** 2)
    assert torch.allclose(raw["fixed_global"], glo**2)


def test_normalisations():
    raw = torch.tensor([[1.0, 3.0], [2.0, 5.0]], dtype=torch.float64)
    mm = normalise(raw, "minmax")
    assert mm.min() == 0 and mm.max() == 1 and zero_heads(mm) == [(0, 0)] and head_labels(zero_heads(mm)) == "L1 H1"
    assert torch.allclose(normalise(raw, "max"), raw / 5)
    assert zero_heads(normalise(raw, "max")) == []
    assert torch.allclose(normalise(raw, "layer_sum").sum(1), torch.ones(2, dtype=torch.float64))
    assert torch.equal(normalise(torch.ones(2, 2), "minmax"), torch.ones(2, 2, dtype=torch.float64))  # a constant: 1
    with pytest.raises(ValueError, match="unknown normalisation"):
        normalise(raw, "softmax")
    out = importance_matrices({"legacy_raw": raw, "fixed_raw": raw}, "layer_sum")
    assert torch.equal(out["legacy"], mm)  # the same min–max of the same matrix
