"""ModernBERT behind the model seam: windowed layers as bands and full layers as queries and keys, against
Hugging Face's eager attention weights (dense, float64), the same numbers under eager and sdpa attention,
every summary against the dense computation, head groups of the fused ``Wqkv``, and IG's completeness."""

from __future__ import annotations

import pytest
import torch

from attnlens.attention.band import Band, received_attention, topk_attended, topk_attending
from attnlens.attention.full import FullLayer
from attnlens.attention.weighted import rollout, value_norm_received, value_norms
from attnlens.attribution.explanations import attention_pass
from attnlens.attribution.ig import Inputs, attribute_example, freeze
from attnlens.classifier.importance import estimate_head_importance
from attnlens.models import architecture, forward_bands
from attnlens.models.modernbert import MODERNBERT
from tests.support.dense import assert_grad_attention_is_dense, dense_reference, dense_rollout
from tests.support.tiny_models import MODERNBERT_HALF as HALF
from tests.support.tiny_models import MODERNBERT_HEADS as HEADS
from tests.support.tiny_models import tiny_modernbert


def _batch(n: int = 23, pad: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (2, n), generator=g)
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, n - pad :] = 0
    ids[1, n - pad :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _dense(layer) -> torch.Tensor:
    return layer.dense() if isinstance(layer, FullLayer) else dense_reference(layer)


def test_registered_with_its_layer_kinds():
    model = tiny_modernbert()
    assert architecture(model) is MODERNBERT
    assert model.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert set(MODERNBERT.embedding_layers(model)) == {"word"}
    groups = MODERNBERT.head_groups(model)
    wqkv = model.model.layers[1].attn.Wqkv.weight
    assert [groups[1][g][2] for g in ("query", "key", "value")] == [slice(0, 24), slice(24, 48), slice(48, 72)]
    assert all(groups[1][g][0] is wqkv for g in ("query", "key", "value"))
    assert groups[1]["output"][0] is model.model.layers[1].attn.Wo.weight
    assert "window ±4" in MODERNBERT.describe(model.config)


def _eager_alone(item: dict[str, torch.Tensor]) -> tuple:
    """Hugging Face's eager attention weights of one unpadded example."""
    with torch.no_grad():
        return tiny_modernbert("eager")(**item, output_attentions=True).attentions


def test_eager_attention_is_nan_on_padded_batches_so_prepare_runs_sdpa():
    """Hugging Face's eager ModernBERT: a padding run longer than the window's half gives NaN logits."""
    batch = _batch()
    with torch.no_grad():
        assert torch.isnan(tiny_modernbert("eager")(**batch).logits[1]).all()
        model = MODERNBERT.prepare(tiny_modernbert("eager"))
        assert model.config._attn_implementation == "sdpa"
        alone = model(**{k: v[1:, :17] for k, v in batch.items()}).logits
        torch.testing.assert_close(model(**batch).logits[1:], alone, rtol=1e-10, atol=1e-12)


def test_layers_read_as_bands_and_full_layers_equal_eager_attention_weights():
    """A padded batch read by attnlens equals each example's eager attention weights, computed alone."""
    model = MODERNBERT.prepare(tiny_modernbert("eager"))
    batch = _batch()
    with torch.no_grad():
        _, layers = MODERNBERT.run(model, batch, attentions=True)
    for item in range(2):
        length = int(batch["attention_mask"][item].sum())
        eager = _eager_alone({k: v[item : item + 1, :length] for k, v in batch.items()})
        for index, layer in enumerate(layers[item]):
            kind = model.config.layer_types[index]
            assert isinstance(layer, Band if kind == "sliding_attention" else FullLayer)
            if isinstance(layer, Band):
                assert layer.half == HALF and layer.x == 0
            expected = torch.zeros(HEADS, 23, 23, dtype=torch.float64)
            expected[:, :length, :length] = eager[index][0]
            torch.testing.assert_close(_dense(layer), expected, rtol=1e-6, atol=1e-12)


def test_eager_and_sdpa_give_the_same_numbers():
    batch = {k: v[:1] for k, v in _batch().items()}  # unpadded: eager's NaN needs padding
    with torch.no_grad():
        a_out, a = MODERNBERT.run(tiny_modernbert("eager"), batch, attentions=True)
        b_out, b = MODERNBERT.run(tiny_modernbert("sdpa"), batch, attentions=True)
    # sdpa's float64 kernels sum in another order: ~1e-10 apart in the logits
    torch.testing.assert_close(a_out.logits, b_out.logits, rtol=1e-6, atol=1e-9)
    for x, y in zip(a[0], b[0], strict=True):
        torch.testing.assert_close(_dense(x), _dense(y), rtol=1e-6, atol=1e-12)


def test_summaries_equal_the_dense_computation():
    model = MODERNBERT.prepare(tiny_modernbert("eager"))
    freeze(model)
    batch = {k: v[1:] for k, v in _batch().items()}
    n = batch["input_ids"].shape[1]
    length = int(batch["attention_mask"].sum())
    eager = _eager_alone({k: v[:, :length] for k, v in batch.items()})
    dense = [torch.zeros(HEADS, n, n, dtype=torch.float64) for _ in eager]
    for a, e in zip(dense, eager, strict=True):
        a[:, :length, :length] = e[0]
    layers, hidden = attention_pass(model, batch)
    for layer, a in zip(layers, dense, strict=True):
        torch.testing.assert_close(received_attention(layer).double(), a.sum(1), rtol=1e-6, atol=1e-12)
        _, val = topk_attended(layer, 3)
        torch.testing.assert_close(val[:, :length], a[:, :length].topk(3, -1).values, rtol=1e-6, atol=1e-12)
        _, val = topk_attending(layer, 3)
        ref = a.transpose(1, 2)[:, :length].topk(3, -1).values
        torch.testing.assert_close(val[:, :length], ref, rtol=1e-6, atol=1e-12)
    for block, layer, h, a in zip(model.model.layers, layers, hidden, dense, strict=True):
        value = MODERNBERT.value_projections(block)["local"]
        norms = value_norms(h, value, block.attn.Wo, HEADS)
        torch.testing.assert_close(
            value_norm_received(layer, norms, norms), (a * norms[:, None]).sum(1), rtol=1e-6, atol=1e-12
        )
    torch.testing.assert_close(rollout(layers, 0), dense_rollout(dense, 0), rtol=1e-6, atol=1e-12)
    assert_grad_attention_is_dense(model, batch, dense, target=2, atol=1e-12)


def test_head_importance_differentiates_the_fused_projection():
    model = tiny_modernbert("sdpa")
    batch = {k: v[:1] for k, v in _batch().items()}
    batch["labels"] = torch.tensor([1])
    out = estimate_head_importance(model, [batch])
    assert out["fixed_local"].shape == (4, HEADS) and bool((out["fixed_local"] > 0).all())
    assert torch.count_nonzero(out["fixed_global"]) == 0


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_integrated_gradients_are_complete(implementation):
    model = tiny_modernbert(implementation)
    ids = torch.tensor([[1, 17, 23, 9, 41, 5, 33, 2]])
    mask = torch.ones_like(ids)
    baseline = ids.clone()
    baseline[0, 1:-1] = 0
    inputs = Inputs(ids, baseline, mask, MODERNBERT.position_ids(model.config, 8), {})
    res = attribute_example(model, inputs, 0, min_steps=64, max_steps=256, tolerance=0.01, internal_batch_size=16)
    assert abs(res.delta) <= 0.01 * abs(res.gap) + 1e-9 and res.scores.shape == (8,)


def test_forward_bands_mixes_the_two_forms():
    layers = forward_bands(tiny_modernbert("sdpa"), {k: v[:1] for k, v in _batch().items()})
    assert [type(layer).__name__ for layer in layers] == ["FullLayer", "Band", "Band", "FullLayer"]


# --- the .test run with a ModernBERT trained from scratch ---------------------------------------------------
