"""Full attention kept as queries and keys (attnlens.attention.full): every summary, computed by query blocks,
against the dense ``heads × n × n`` matrix built directly (float64), and layers of different forms combined.
Blocks are made small (``BLOCK_BYTES``) so that every reduction crosses block boundaries."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function
from transformers.models.llama.modeling_llama import eager_attention_forward

from attnlens.attention import full
from attnlens.attention.band import binned_image, received_attention, topk_attended, topk_attending
from attnlens.attention.full import Combination, FullLayer
from attnlens.attention.kernels import full_block_kernel
from attnlens.attention.summaries import BANDS_SCHEMA, band_tensors, load_bands
from attnlens.attention.weighted import grad_attention_received, rollout, value_norm_received
from attnlens.io import provenance, save_tensors
from attnlens.topology.pooling import pooled_from_bands
from tests.support.dense import (
    CASES,
    CAUSAL,
    dense_reference,
    dense_rollout,
    random_band,
    random_causal,
    random_full,
    reference_topk,
)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(full, "BLOCK_BYTES", 700)  # a few queries per block


def dense_full(layer: FullLayer) -> torch.Tensor:
    """``(H, n, n)`` softmax over the real keys, real queries only: written out directly."""
    length = layer.length
    out = torch.zeros(layer.heads, layer.n, layer.n, dtype=torch.float64)
    scores = layer.query[:, :length] @ layer.key[:, :length].transpose(1, 2)
    out[:, :length, :length] = torch.softmax(scores, -1)
    return out


def assert_summaries_equal_the_dense(layer, dense: torch.Tensor, ks) -> None:
    """Received attention and both top-k tables of ``layer`` equal ``dense``'s (float64 softmaxes of the same scores
    summed in another order: 1e-12; indices exactly, ties to the smaller position)."""
    torch.testing.assert_close(received_attention(layer), dense.sum(1), rtol=1e-12, atol=1e-12)
    for k in ks:
        for fn, axis in ((topk_attended, "row"), (topk_attending, "column")):
            ref_idx, ref_val = reference_topk(dense, k, layer.length, axis)
            idx, val = fn(layer, k)
            assert torch.equal(idx.long(), ref_idx), (k, axis)
            torch.testing.assert_close(val, ref_val, rtol=1e-12, atol=1e-12)


SHAPES = [(2, 17, 17), (3, 20, 13), (1, 6, 1), (2, 9, 4)]


@pytest.mark.parametrize(("heads", "n", "length"), SHAPES)
def test_received_and_topk_equal_the_dense_matrix(heads, n, length):
    layer = random_full(heads, n, length, seed=n)
    dense = dense_full(layer)
    assert_summaries_equal_the_dense(layer, dense, (1, 3, 30))


@pytest.mark.parametrize(("heads", "n", "length"), SHAPES)
def test_one_pass_summaries_equal_the_separate_ones(heads, n, length):
    layer = random_full(heads, n, length, seed=n + 1)
    one = full.summaries(layer, 3)
    torch.testing.assert_close(one["received"], received_attention(layer), rtol=1e-12, atol=1e-12)
    for name, fn in (("attended", topk_attended), ("attending", topk_attending)):
        idx, val = fn(layer, 3)
        assert torch.equal(one[f"{name}_idx"], idx)
        torch.testing.assert_close(one[f"{name}_val"], val, rtol=0, atol=0)
    assert set(full.summaries(layer, None)) == {"received"}


def test_topk_ties_go_to_the_smaller_position():
    """Equal keys give equal scores: the partner of smaller position comes first, in both directions."""
    q = torch.ones(1, 7, 2, dtype=torch.float64)
    k = torch.zeros(1, 7, 2, dtype=torch.float64)  # every score 0: uniform rows, all ties
    layer = FullLayer(q, k, 7)
    idx, val = topk_attended(layer, 3)
    assert idx[0, :, :].tolist() == [[0, 1, 2]] * 7 and torch.allclose(val, torch.full_like(val, 1 / 7))
    idx, _ = topk_attending(layer, 3)
    assert idx[0, :, :].tolist() == [[0, 1, 2]] * 7


@pytest.mark.parametrize("bins", [1, 4])
def test_binned_image_equals_the_dense_matrix(bins):
    layer = random_full(2, 19, 15, seed=3)
    dense = dense_full(layer)
    n_ref = 21
    edges = [i * bins // n_ref for i in range(n_ref)]
    count = torch.arange(n_ref, 0, -1)
    ref = torch.zeros(2, bins, bins, dtype=torch.float64)
    weighted = torch.zeros_like(ref)
    for i in range(15):
        for j in range(15):
            ref[:, edges[i], edges[j]] += dense[:, i, j]
            weighted[:, edges[i], edges[j]] += dense[:, i, j] / float(count[max(i, j)])
    torch.testing.assert_close(binned_image(layer, bins, n_ref), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(binned_image(layer, bins, n_ref, count=count), weighted, rtol=1e-12, atol=1e-12)


def test_weighted_summaries_equal_the_dense_matrix():
    layer = random_full(3, 16, 12, seed=5)
    dense = dense_full(layer)
    g = torch.Generator().manual_seed(1)
    norms = torch.rand(3, 16, generator=g, dtype=torch.float64)
    torch.testing.assert_close(value_norm_received(layer, norms, None), (dense * norms[:, None, :]).sum(1))
    grad = torch.randn(3, 16, 4, generator=g, dtype=torch.float64)
    value = torch.randn(3, 16, 4, generator=g, dtype=torch.float64)
    expected = (dense * (grad @ value.transpose(1, 2))).sum(1)
    torch.testing.assert_close(grad_attention_received(layer, grad, value, value), expected)


# --- a decoder's layers: causal, sliding windows, grouped-query keys -------------------------------------------


def dense_causal(layer: FullLayer) -> torch.Tensor:
    """``(H, n, n)`` written out query by query: head ``h`` reads key head ``h // (H / KV)``, query ``i`` the real
    keys ``max(0, i − window + 1) … i``, a softmax over them in float64."""
    out = torch.zeros(layer.heads, layer.n, layer.n, dtype=torch.float64)
    group = layer.heads // layer.key_heads
    for h in range(layer.heads):
        for i in range(layer.length):
            lo = 0 if layer.window is None else max(0, i - layer.window + 1)
            scores = [float(layer.query[h, i] @ layer.key[h // group, j]) for j in range(lo, i + 1)]
            top = max(scores)
            weights = [np.exp(v - top) for v in scores]
            for j, w in zip(range(lo, i + 1), weights, strict=True):
                out[h, i, j] = w / sum(weights)
    return out


def hugging_face_eager(layer: FullLayer) -> torch.Tensor:
    """The same layer through Hugging Face's eager attention (Llama's ``eager_attention_forward``: ``repeat_kv``,
    an additive mask, softmax), with the causal and sliding-window mask Mistral's masking functions define."""
    n = layer.length
    allowed = sliding_window_causal_mask_function(layer.window) if layer.window else causal_mask_function
    zero = torch.tensor(0)
    mask = allowed(zero, zero, torch.arange(n)[:, None], torch.arange(n)[None, :]).expand(n, n)
    additive = torch.zeros(1, 1, n, n, dtype=torch.float64).masked_fill(~mask, torch.finfo(torch.float64).min)
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = layer.heads // layer.key_heads, False
    q, k = layer.query[None, :, :n], layer.key[None, :, :n]
    _, weights = eager_attention_forward(module, q, k, k, additive, scaling=1.0, dropout=0.0)
    out = torch.zeros(layer.heads, layer.n, layer.n, dtype=torch.float64)
    out[:, :n, :n] = weights[0]
    return out


@pytest.mark.parametrize(("heads", "key_heads", "n", "length", "window"), CAUSAL)
def test_a_causal_layer_is_its_dense_matrix_and_hugging_faces_eager_attention(heads, key_heads, n, length, window):
    """Every summary of a decoder's layer (grouped-query keys never repeated, only reachable keys scored) against
    the matrix written out query by query (1e-12: float64 softmaxes of the same scores, summed in another order),
    and that matrix against Hugging Face's eager attention, whose softmax runs in float32 whatever the inputs'
    precision (``softmax(…, dtype=torch.float32)``: a few float32 roundings, 1e-6 relative)."""
    layer = random_causal(heads, key_heads, n, length, window, seed=n + heads)
    dense = dense_causal(layer)
    torch.testing.assert_close(hugging_face_eager(layer), dense, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(layer.dense(), dense, rtol=1e-12, atol=1e-12)
    assert not dense.triu(1).any()  # no query attends to a later key
    assert_summaries_equal_the_dense(layer, dense, (1, 3, 30))
    g = torch.Generator().manual_seed(2)
    norms = torch.rand(heads, n, generator=g, dtype=torch.float64)
    torch.testing.assert_close(value_norm_received(layer, norms, None), (dense * norms[:, None, :]).sum(1))
    grad = torch.randn(heads, n, 3, generator=g, dtype=torch.float64)
    value = torch.randn(heads, n, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(
        grad_attention_received(layer, grad, value, value), (dense * (grad @ value.transpose(1, 2))).sum(1)
    )


@pytest.mark.parametrize(("key_heads", "length", "window"), [(2, 40, 5), (1, 33, None), (2, 40, 1)])
def test_a_causal_layer_reduced_in_small_blocks_reads_each_block_from_its_first_reachable_key(
    monkeypatch, key_heads, length, window
):
    """Blocks of 3 queries: each block's probabilities span only the keys it can reach (from ``i − window + 1``, up
    to its last query), handed to the compiled summaries with their first key; received attention and both top-k
    tables equal the dense matrix's (float64: 1e-12; indices exactly, ties to the smaller position)."""
    layer = random_causal(4, key_heads, 40, length, window, seed=length)
    # 3 rows of 4 heads × 40 keys (a window's block: 3 + window keys), float64, and a copy
    monkeypatch.setattr(full, "BLOCK_BYTES", 2 * 4 * 8 * 3 * (40 if window is None else 3 + window))
    assert layer.block_rows() == 3
    widths = [(lo, probs.shape[-1]) for _, _, lo, probs in layer.reachable_blocks()]
    assert widths[4] == ((max(0, 12 - window + 1), 15 - max(0, 12 - window + 1)) if window else (0, 15))
    dense = dense_causal(layer)
    assert_summaries_equal_the_dense(layer, dense, (1, 3))


def test_a_causal_layer_is_stored_and_read_back_with_its_window(tmp_path):
    layers = [random_causal(4, 2, 9, 9, None, seed=1), random_causal(4, 2, 9, 9, 3, seed=2), random_full(4, 9, 9, 3)]
    ids = torch.arange(9)
    save_tensors(
        band_tensors("doc", ids, layers), tmp_path / "b.safetensors", provenance(BANDS_SCHEMA, example_ids=["doc"])
    )
    back, _ = load_bands([tmp_path / "b.safetensors"], "doc")
    assert [(b.causal, b.window, b.key_heads) for b in back] == [(True, None, 2), (True, 3, 2), (False, None, 4)]
    for a, b in zip(layers, back, strict=True):
        torch.testing.assert_close(b.dense(), a.dense().float(), rtol=1e-6, atol=1e-7)  # stored as float32


def test_a_layer_that_cannot_be_is_refused():
    q, k = torch.zeros(4, 5, 2), torch.zeros(3, 5, 2)
    with pytest.raises(ValueError, match="3 key heads do not divide 4 query heads"):
        FullLayer(q, k, 5, causal=True)
    with pytest.raises(ValueError, match="a causal layer's"):
        FullLayer(q, q, 5, window=3)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_band_rows_are_its_dense_reconstruction(case):
    heads, n, length, window, gpos, x = CASES[case]
    band = random_band(heads, n, length, window, gpos, x, seed=case, dtype=torch.float64)
    dense = dense_reference(band)
    rebuilt = torch.zeros_like(dense)
    for start, stop, probs in band.blocks():
        rebuilt[:, start:stop] = probs
    torch.testing.assert_close(rebuilt, dense, rtol=0, atol=0)


def test_rollout_and_combinations_mix_bands_and_full_layers():
    """ModernBERT's stack: full and windowed layers alternate. Rollout, the weighted combination of a layer
    configuration and topology's pooled cells equal the dense computation."""
    n = 14
    layers = [
        random_full(2, n, n, seed=1),
        random_band(2, n, n, 4, [], 0, seed=2, dtype=torch.float64),
        random_full(2, n, n, seed=3),
    ]
    dense = [dense_full(layers[0]), dense_reference(layers[1]), dense_full(layers[2])]
    torch.testing.assert_close(rollout(layers, 0), dense_rollout(dense, 0))
    weights = torch.tensor([[1.0, 0.5], [0.0, 2.0], [0.25, 0.0]])
    combined = Combination(tuple(layers), weights)
    expected = sum(torch.einsum("h,hij->ij", w.double(), a) for w, a in zip(weights, dense, strict=True))
    torch.testing.assert_close(received_attention(combined)[0].double(), expected.sum(0), rtol=1e-5, atol=1e-5)
    idx, _ = topk_attended(combined, 2)
    ref_idx, _ = reference_topk(expected[None].float().double(), 2, n, "row")
    assert torch.equal(idx.long(), ref_idx)
    unit_of = np.array([0, 0, 1, 1, 1, -1, 2, 2, 3, 3, 3, 3, 4, -1])
    pooled = pooled_from_bands(layers, unit_of)
    m = 5
    counts = np.bincount(unit_of[unit_of >= 0], minlength=m)
    for index, a in enumerate(dense):
        ref = np.zeros((2, m, m))
        for i in range(n):
            for j in range(n):
                if unit_of[i] >= 0 and unit_of[j] >= 0:
                    ref[:, unit_of[i], unit_of[j]] += a[:, i, j].numpy()
        np.testing.assert_allclose(pooled[index], ref / counts[:, None], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("length", [17, 11])
def test_blocks_equal_the_probabilities_bit_for_bit(length):
    """Unpadded blocks are formed in one reused buffer with softmax in place: the same bits as the allocating path
    (and a block's tensor is only valid until the next one is asked for)."""
    layer = random_full(3, 17, length, seed=5)
    layer = FullLayer(layer.query.float(), layer.key.float(), length)
    for start, stop, probs in layer.blocks():
        assert torch.equal(probs, layer.probabilities(start, stop)), (start, stop)


def test_half_precision_layers_are_reduced_in_float32():
    """A bfloat16 layer (a model run in half precision): the kernel reduces its probabilities in float32 and the
    outputs come back in bfloat16, equal to the float32 reduction of the same bfloat16 probabilities."""
    layer = random_full(2, 13, 13, seed=9)
    half = FullLayer(layer.query.to(torch.bfloat16), layer.key.to(torch.bfloat16), 13)
    out = full.summaries(half, 3)
    assert out["received"].dtype == out["attended_val"].dtype == torch.bfloat16
    dense = torch.cat([p.float() for _, _, p in half.blocks()], 1)  # the bfloat16 probabilities, exactly
    torch.testing.assert_close(out["received"], dense.double().sum(1).to(torch.bfloat16), rtol=0, atol=0)
    ref_idx, ref_val = reference_topk(dense.double(), 3, 13, "row")
    assert torch.equal(out["attended_idx"].long(), ref_idx)
    torch.testing.assert_close(out["attended_val"].double(), ref_val.to(torch.bfloat16).double(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nan_scores_are_never_reported_and_hide_no_partner(dtype):
    """Rows with a NaN in k of their 16-key chunks (a broken model's output) and their largest scores in the one
    chunk without: the non-NaN top-k of each row and column are still found, as the band reports them (only
    scores > 0 count). A NaN chunk maximum must not count towards the bound that lets a chunk be skipped."""
    g = torch.Generator().manual_seed(3)
    probs = (0.5 * torch.rand(2, 5, 70, generator=g, dtype=torch.float64)).to(dtype)
    probs[:, :, 64:] += 0.4  # the row's best keys, all in the last chunk
    probs[:, :, [0, 16, 32, 48]] = float("nan")  # a NaN in each of the other four chunks (k = 4)
    probs[1, 2] = float("nan")  # and a row of NaN only
    k = 4
    received = np.zeros((2, 70))

    def state():
        values = probs.numpy().dtype
        return (
            np.full((2, 70, k), -1, np.int32),
            np.zeros((2, 70, k), values),
            np.zeros((2, 70), np.int64),
            np.zeros((2, 70), values),
            np.full((2, 70), -1, np.int32),
        )

    rows, cols = state(), state()
    full_block_kernel(probs.numpy(), 0, 70, received, rows, cols)
    dense = torch.zeros(2, 70, 70, dtype=torch.float64)
    dense[:, :5] = probs.double()
    ref_idx, ref_val = reference_topk(dense, k, 70, "row")
    assert torch.equal(torch.from_numpy(rows[0][:, :5]).long(), ref_idx[:, :5])
    torch.testing.assert_close(torch.from_numpy(rows[1][:, :5]).double(), ref_val[:, :5], rtol=0, atol=0)
    col_ref = reference_topk(dense.transpose(1, 2).contiguous(), k, 70, "row")
    assert torch.equal(torch.from_numpy(cols[0]).long(), col_ref[0])
    torch.testing.assert_close(torch.from_numpy(cols[1]).double(), col_ref[1], rtol=0, atol=0)
