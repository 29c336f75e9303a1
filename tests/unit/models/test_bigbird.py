"""BigBird behind the model seam: the eval-mode block-sparse path against Hugging Face's forward, its bands
against explicit masked ``n × n`` attention built from the layer's own queries and keys (float64), the
summaries on those bands against the dense computation, and the BERT → BigBird conversion."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from attnlens.attention.band import received_attention, topk_attended, topk_attending
from attnlens.attention.weighted import grad_attention_received, rollout, value_norm_received, value_norms
from attnlens.attribution.explanations import attention_pass, gradient_pass
from attnlens.attribution.ig import freeze
from attnlens.models import ARCHITECTURES, architecture, forward_bands
from attnlens.models.bigbird import BIGBIRD
from attnlens.models.bigbird.bert_to_bigbird import convert_bert_to_bigbird
from attnlens.models.bigbird.block_sparse import full_threshold, uses_block_sparse
from tests.support.dense import dense_reference, dense_rollout
from tests.support.tiny_models import BIGBIRD_BLOCK as BLOCK
from tests.support.tiny_models import BIGBIRD_RANDOM as RANDOM
from tests.support.tiny_models import bigbird_batch as _batch
from tests.support.tiny_models import tiny_bigbird


def test_registered_by_model_type():
    model = tiny_bigbird()
    assert architecture(model) is BIGBIRD and ARCHITECTURES["big_bird"] is BIGBIRD
    assert BIGBIRD.head_group_names == ("query", "key", "value", "output")
    groups = BIGBIRD.head_groups(model)
    assert len(groups) == 2 and groups[0]["query"][0] is model.bert.encoder.layer[0].attention.self.query.weight
    assert BIGBIRD.position_ids(model.config, 4).tolist() == [[0, 1, 2, 3]]
    assert set(BIGBIRD.embedding_layers(model)) == {"word", "position", "token_type"}


@pytest.mark.parametrize(("n", "pad"), [(160, 0), (150, 13), (60, 5)])
def test_block_sparse_path_is_huggingface_forward(n, pad):
    """Same logits and hidden states as Hugging Face's block-sparse (or, short, full) forward, with
    inputs that are not a multiple of the block and padded batches."""
    ref = tiny_bigbird()
    model = BIGBIRD.prepare(copy.deepcopy(ref))
    batch = _batch(n, pad)
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=True)
        theirs = ref(**batch, output_hidden_states=True)
    assert uses_block_sparse(model.config, n) == (n > full_threshold(model.config))
    torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-10, atol=1e-12)
    for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(a[real], b[:, : a.shape[1]][real], rtol=1e-10, atol=1e-12)


def test_a_short_input_does_not_switch_the_model_to_full_attention():
    """Hugging Face switches a block-sparse model to full attention for good after a short input."""
    model = BIGBIRD.prepare(tiny_bigbird())
    long = _batch(160)
    with torch.no_grad():
        before = model(**long).logits
        model(**_batch(40))
        after = model(**long).logits
    assert model.bert.attention_type == "block_sparse"
    torch.testing.assert_close(before, after, rtol=0, atol=0)


def _dense_attention(model, batch) -> list[torch.Tensor]:
    """Per layer ``(B, H, n, n)``: explicit masked attention from the layer's queries and keys (float64).

    Block-sparse: query blocks 0 and nb − 1 see every real key; a query of block l sees blocks l − 1 … l + 1
    and the global blocks, block 0 counted 1 + r times (eval mode's random blocks). Short inputs: full.
    """
    config = model.config
    hidden = []
    handles = [
        layer.attention.register_forward_pre_hook(lambda m, a: hidden.append(a[0]))
        for layer in model.bert.encoder.layer
    ]
    with torch.no_grad():
        model(**batch)
    for h in handles:
        h.remove()
    out = []
    b = config.block_size
    for layer, h in zip(model.bert.encoder.layer, hidden, strict=True):
        sa = layer.attention.self
        n = h.shape[1]
        n_pad = n + (-n % b)
        q = sa.query(h).view(2, n, 3, -1).transpose(1, 2) / math.sqrt(8)
        k = sa.key(h).view(2, n, 3, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2)
        key_ok = batch["attention_mask"].bool()[:, None, None, :]
        weight = torch.ones(n, n, dtype=torch.float64)
        if uses_block_sparse(config, n):
            blk = torch.arange(n) // b
            nb = n_pad // b
            qb, kb = blk[:, None], blk[None, :]
            glob_q = (qb == 0) | (qb == nb - 1)
            seen = glob_q | ((kb - qb).abs() <= 1) | (kb == 0) | (kb == nb - 1)
            weight = seen.double()
            weight[(~glob_q[:, 0])[:, None] & (kb == 0)] = 1 + config.num_random_blocks
        probs = torch.exp(scores - scores.amax(-1, keepdim=True)) * weight * key_ok
        out.append(probs / probs.sum(-1, keepdim=True) * batch["attention_mask"][:, None, :, None])
    return out


@pytest.mark.parametrize(("n", "pad"), [(160, 0), (150, 13), (60, 5)])
def test_bands_equal_explicit_dense_attention(n, pad):
    model = BIGBIRD.prepare(tiny_bigbird())
    batch = _batch(n, pad)
    dense = _dense_attention(model, batch)
    with torch.no_grad():
        _, bands = BIGBIRD.run(model, batch, attentions=True)
    for item in range(2):
        length = int(batch["attention_mask"][item].sum())
        for layer, band in enumerate(bands[item]):
            assert band.length == length
            rebuilt = dense_reference(band)[:, :n, :n]
            torch.testing.assert_close(rebuilt, dense[layer][item], rtol=1e-6, atol=1e-12)


def test_bands_match_huggingface_probabilities_where_it_keeps_them():
    """Hugging Face's own dense probabilities (``output_attentions``) scatter-*assign* the random blocks: in eval
    mode they overwrite block 0's columns of the middle rows with one of its 1 + r equal terms."""
    ref = tiny_bigbird()
    model = BIGBIRD.prepare(copy.deepcopy(ref))
    batch = _batch(160)
    with torch.no_grad():
        hf = ref(**batch, output_attentions=True).attentions
        _, bands = BIGBIRD.run(model, batch, attentions=True)
    for layer, band in enumerate(bands[0]):
        ours = dense_reference(band)
        theirs = hf[layer][0].double()
        middle = slice(BLOCK, 160 - BLOCK)
        ours[:, middle, :BLOCK] /= 1 + RANDOM
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-12)


def test_summaries_equal_the_dense_computation():
    """Received attention, top-k, value norms, rollout and gradient-weighted attention on the bands equal the
    same quantities of the explicit dense matrices (rtol 1e-6)."""
    model = BIGBIRD.prepare(tiny_bigbird())
    freeze(model)
    batch = _batch(150, 13)
    one = {k: v[1:] for k, v in batch.items()}
    length = int(one["attention_mask"].sum())
    dense = [d[1] for d in _dense_attention(model, batch)]
    bands, hidden = attention_pass(model, one)
    for band, a in zip(bands, dense, strict=True):
        torch.testing.assert_close(received_attention(band).double(), a.sum(1), rtol=1e-6, atol=1e-12)
        _, val = topk_attended(band, 3)
        ref_val, _ = a[:, :length].topk(3, dim=-1)
        torch.testing.assert_close(val[:, :length].double(), ref_val, rtol=1e-6, atol=1e-12)
        _, val = topk_attending(band, 3)
        ref_val, _ = a.transpose(1, 2)[:, :length].topk(3, dim=-1)
        torch.testing.assert_close(val[:, :length].double(), ref_val, rtol=1e-6, atol=1e-12)
    # value norms: Σ_i A_ij ‖f(x_j)‖
    for layer, band, h, a in zip(model.bert.encoder.layer, bands, hidden, dense, strict=True):
        norms = value_norms(h, layer.attention.self.value, layer.attention.output.dense, 3)
        got = value_norm_received(band, norms, norms)
        torch.testing.assert_close(got.double(), (a * norms[:, None, :]).sum(1), rtol=1e-6, atol=1e-12)
    # rollout of the CLS row
    torch.testing.assert_close(rollout(bands, 0), dense_rollout(dense, 0), rtol=1e-6, atol=1e-12)
    # gradient-weighted attention: Σ_i A_ij ⟨∂F/∂o_i, v_j⟩
    grads = gradient_pass(model, one, target=1, attentions=True)
    for layer, band, h, g, a in zip(
        model.bert.encoder.layer, grads.bands, grads.hidden, grads.output_grads, dense, strict=True
    ):
        v = layer.attention.self.value(h).view(150, 3, -1).transpose(0, 1)
        gh = g.view(150, 3, -1).transpose(0, 1)
        expected = (a * (gh @ v.transpose(1, 2))).sum(1)
        got = grad_attention_received(band, gh, v, v)
        torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=1e-12)


def test_forward_bands_is_one_example(tiny_classifier):
    model = BIGBIRD.prepare(tiny_bigbird())
    batch = {k: v[:1] for k, v in _batch(100).items()}
    bands = forward_bands(model, batch)
    assert len(bands) == 2 and bands[0].global_positions.tolist() == list(range(8)) + list(range(96, 100))


def test_converted_minilm_is_bert_under_full_attention(minilm):
    bert, tokenizer = minilm
    model = convert_bert_to_bigbird(bert, tokenizer, 256, 16, 3, 3, seed=0)
    BIGBIRD.prepare(model)
    enc = tokenizer(["a short text that runs full attention"], return_tensors="pt")
    with torch.no_grad():
        ours = model.bert(**enc).last_hidden_state
        theirs = bert(**enc).last_hidden_state
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert model.config.model_type == "big_bird" and model.config.max_position_embeddings == 256


# --- the .test run with the packaged MiniLM converted to a BigBird ------------------------------------------
