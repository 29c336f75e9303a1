"""Band-native attention operations against a brute-force dense reconstruction (recipes §5.2 item 7).

The reference :func:`dense_reference` is a plain loop over queries written from the HF layout
description, independent of the vectorised code. Random bands cover x ∈ {0, 1, 2, 3} global slots,
global tokens away from position 0, fewer globals than slots, windows 2–16, lengths that are not a
multiple of the window, padding, exact ties and zero weights, and garbage in every slot that must
not count. A real Longformer checks the layout itself: with a window covering the input, the
reconstruction equals softmax attention computed independently from the hidden states.
"""

from __future__ import annotations

import pytest
import torch

from attnlens.attention.band import (
    Band,
    bin_cells,
    binned_image,
    layer_configuration,
    received_attention,
    topk_attended,
    topk_attending,
)
from attnlens.attention.summaries import (
    compute_example_summaries,
    count_topk,
    intersect_counts,
    position_counts,
)
from attnlens.classifier.prediction import encode_texts
from attnlens.models import architecture, forward_bands
from attnlens.models.longformer import bands_from_outputs
from attnlens.sharding import shard_of
from tests.support.dense import CASES, dense_reference, independent_attention, random_band, reference_topk
from tests.support.tiny_models import tiny_longformer

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


@pytest.fixture(params=range(len(CASES)), ids=lambda i: f"case{i}")
def band(request):
    heads, n, length, window, gpos, x = CASES[request.param]
    return random_band(heads, n, length, window, gpos, x, seed=request.param)


def test_reference_rows_sum_to_one(band):
    dense = dense_reference(band)
    real = dense[:, : band.length].sum(-1)
    # float32-rounded fractions that sum to 1: their rounding errors add up to at most 2⁻²⁴ of the sum
    assert torch.allclose(real, torch.ones_like(real), atol=1e-6)
    assert dense[:, band.length :].abs().sum() == 0 and dense[:, :, band.length :].abs().sum() == 0


def test_received_matches_dense(band):
    expected = dense_reference(band).sum(1)
    got = received_attention(band)
    assert got.shape == (band.heads, band.n)
    # float32 sums of ≤ 37 weights in [0, 1] (columns sum to ≲ 10) against float64: ≤ 37 · 10 · 2⁻²⁴ ≈ 2e-5 in the
    # worst case, ~1e-6 as rounding errors of random sign add (measured ≤ 1e-6)
    assert torch.allclose(got.double(), expected, atol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 40])
@pytest.mark.parametrize(
    ("topk", "axis"), [(topk_attended, "row"), (topk_attending, "column")], ids=["attended", "attending"]
)
def test_topk_matches_dense(band, k, topk, axis):
    ref_idx, ref_val = reference_topk(dense_reference(band), k, band.length, axis)
    idx, val = topk(band, k)
    assert torch.equal(idx, ref_idx)  # weights are multiples of 1/m, ties broken by position on both sides
    assert torch.allclose(val.double(), ref_val, atol=1e-6)  # a float32 weight ≤ 1 (or a sum of two) vs float64


@pytest.mark.parametrize("bins", [1, 4, 7])
def test_binned_image_matches_dense(band, bins):
    dense = dense_reference(band)
    n_ref = band.n + 2
    edges = [i * bins // n_ref for i in range(n_ref)]
    count = torch.arange(n_ref, 0, -1)  # any positive count per position
    ref = torch.zeros(band.heads, bins, bins, dtype=torch.float64)
    ref_weighted = torch.zeros_like(ref)
    for i in range(band.length):
        for j in range(band.length):
            ref[:, edges[i], edges[j]] += dense[:, i, j]
            ref_weighted[:, edges[i], edges[j]] += dense[:, i, j] / float(count[max(i, j)])
    # float32 bin sums of up to n² weights (a bin holds ≤ n = 37 rows' worth, ≲ 37 in all) against float64: the
    # same 2⁻²⁴-per-addition bound as received attention (measured ≤ 4e-6); the weighted image divides first
    assert torch.allclose(binned_image(band, bins, n_ref).double(), ref, atol=1e-5)
    assert torch.allclose(binned_image(band, bins, n_ref, count=count).double(), ref_weighted, atol=1e-6)
    own = binned_image(band, bins)  # default: the example's own length
    assert torch.allclose(own.sum((1, 2)).double(), dense.sum((1, 2)), atol=1e-5)


def test_bin_cells_counts_real_cells():
    cells = bin_cells([5, 3], bins=2, n_ref=6)  # edges 0,0,0,1,1,1
    assert cells.tolist() == [[9 + 9, 6 + 0], [6 + 0, 4 + 0]]


def test_layer_configuration():
    received = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(4, 3, 2).permute(0, 1, 2)  # (L=4, H=3, n=2)
    # small integers in float32: every sum is exact, whatever its order
    assert torch.equal(layer_configuration(received, "last"), received[3].sum(0))
    assert torch.equal(layer_configuration(received, "all"), received.sum((0, 1)))
    assert torch.equal(layer_configuration(received, "lower"), received[:2].sum((0, 1)))
    assert torch.equal(layer_configuration(received, "upper"), received[2:].sum((0, 1)))
    weights = torch.rand(4, 3)
    weighted = (received * weights[:, :, None]).sum((0, 1))  # float32, 12 terms ≲ 23: allclose's 1e-5 relative
    assert torch.allclose(layer_configuration(received, "all", weights), weighted)
    with pytest.raises(ValueError, match="unknown layer configuration"):
        layer_configuration(received, "middle")


def test_band_rejects_inconsistent_layout():
    with pytest.raises(ValueError, match="even window"):
        Band(torch.zeros(1, 5, 4), None, 5, torch.zeros(0, dtype=torch.long))
    with pytest.raises(ValueError, match="padding"):
        Band(torch.zeros(1, 5, 4), torch.zeros(1, 8, 1), 3, torch.tensor([4]))


# --- a real Longformer -----------------------------------------------------------------------


def _tiny_longformer(window: int, n_layers: int = 2, heads: int = 3, hidden: int = 12):
    """The shared tiny encoder, float64, with global and local Q/K projections made clearly different."""
    model = tiny_longformer(hidden=hidden, layers=n_layers, heads=heads, window=window, seed=3, double=True)
    with torch.no_grad():  # make global projections differ from the local ones
        for layer in model.encoder.layer:
            for proj in ("query_global", "key_global", "value_global"):
                getattr(layer.attention.self, proj).weight.normal_(0, 0.5)
            for proj in ("query", "key"):
                getattr(layer.attention.self, proj).weight.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("global_positions", [(0,), (0, 4), (2, 5, 9)])
def test_real_model_reconstruction_equals_full_attention(global_positions):
    n = 14
    model = _tiny_longformer(window=2 * n)  # one-sided window n ≥ n − 1: every key is in reach
    ids = torch.randint(3, 50, (2, n), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, 11:] = 0  # second item padded
    ids[1, 11:] = 1
    gmask = torch.zeros_like(mask)
    gmask[:, list(global_positions)] = 1
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=mask,
            global_attention_mask=gmask,
            output_attentions=True,
            output_hidden_states=True,
        )
    expected = independent_attention(model, out.hidden_states, mask, gmask * mask)
    bands = bands_from_outputs(out.attentions, out.global_attentions, mask, gmask)
    for b, layers in enumerate(bands):
        for layer, band in enumerate(layers):
            dense = dense_reference(band)
            length = band.length
            # float64 model, but Longformer's softmax rounds to float32: rows sum to 1 within 2⁻²⁴ (allclose: 1e-8)
            assert torch.allclose(dense[:, :length].sum(-1), torch.ones(band.heads, length, dtype=torch.float64))
            # Hugging Face's probabilities went through its float32 softmax, the reference's are float64: each
            # within 2⁻²⁴ relative (measured ≤ 1.5e-7 absolute), inside allclose's default rtol of 1e-5
            assert torch.allclose(dense, expected[layer, b], atol=1e-10)
            # and the band operations agree with the dense matrix of a real model (the same float64 numbers, summed
            # in another order: float64 rounding, far inside atol + rtol)
            assert torch.allclose(received_attention(band), dense.sum(1), atol=1e-10)
            ref_idx, _ = reference_topk(dense, 3, length, "row")  # ties broken by position on both sides: equal
            assert torch.equal(topk_attended(band, 3)[0], ref_idx)
            ref_idx, _ = reference_topk(dense, 3, length, "column")
            assert torch.equal(topk_attending(band, 3)[0], ref_idx)


def test_real_model_narrow_window_rows_sum_to_one():
    """With a window narrower than the input the reconstruction still has stochastic rows, and
    window slots pointing outside the sequence, at padding or at a global key carry no weight."""
    model = _tiny_longformer(window=4, n_layers=1)
    n = 13
    ids = torch.randint(3, 50, (2, n), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, n, dtype=torch.long)
    mask[0, 10:] = 0
    gmask = torch.zeros_like(mask)
    gmask[0, [0, 3]] = 1
    gmask[1, 6] = 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, global_attention_mask=gmask, output_attentions=True)
    for layers in bands_from_outputs(out.attentions, out.global_attentions, mask, gmask):
        band = layers[0]
        dense = dense_reference(band)
        # float32 softmax probabilities summed in float64: within 2⁻²⁴ of 1 (allclose: 1e-8)
        assert torch.allclose(dense[:, : band.length].sum(-1), torch.ones(band.heads, band.length, dtype=torch.float64))
        unused = band.local.masked_select((band.slot_keys < 0)[None].expand_as(band.local))
        assert unused.abs().max() <= 1e-8


# --- top-k counts and extraction helpers -------------------------------------------------------


def test_count_topk_matches_set_semantics():
    """count(t) = number of self positions having t among surviving partners (recipes §7 steps 3–5)."""

    g = torch.Generator().manual_seed(0)
    n, k = 9, 3
    partners = torch.randint(-1, n, (2, 3, n, k), generator=g)
    labels = ["the", "model", "data", "model", ".", "data", "x", "model", "the"]
    keep = [lab not in ("the", ".") for lab in labels]
    by_type, by_pos = count_topk(partners, labels, keep)
    sets_type = [set() for _ in range(n)]
    sets_pos = [set() for _ in range(n)]
    for layer in range(2):
        for h in range(3):
            for p in range(n):
                for j in partners[layer, h, p].tolist():
                    if j >= 0 and keep[j]:
                        sets_type[p].add(labels[j])
                        sets_pos[p].add(j)
    for tok, cnt in zip(by_type["token"], by_type["count"], strict=True):
        assert cnt == sum(tok in s for s in sets_type)
    assert set(by_type["token"]) == set().union(*sets_type)
    for pos, cnt in zip(by_pos["position"], by_pos["count"], strict=True):
        assert cnt == sum(pos in s for s in sets_pos)
    assert list(by_type["count"]) == sorted(by_type["count"], reverse=True)
    inter = intersect_counts(by_type, by_type, 2, "token")
    assert list(inter["token"]) == list(by_type["token"][:2])
    inter_pos = intersect_counts(by_pos, by_pos, 3, "position")
    assert list(inter_pos.columns) == ["token", "position", "count_attended", "count_attending"]


def test_shard_of_is_stable_and_spreads():

    assert shard_of("syn00000", 4) == shard_of("syn00000", 4)
    assert shard_of("syn00000", 1) == 0
    counts = torch.bincount(torch.tensor([shard_of(f"syn{i:05d}", 4) for i in range(400)]), minlength=4)
    assert counts.min() > 60  # roughly uniform


def test_summaries_of_a_real_forward(tiny_classifier):

    model, tokenizer = tiny_classifier
    encoded = encode_texts(tokenizer, ["a long enough text about attention windows " * 4, "short one"])
    bands = forward_bands(model, encoded.batch([0], arch=architecture(model)))
    out = compute_example_summaries(bands, k=4)
    n = len(encoded.input_ids[0])
    assert out["received"].shape == (2, 2, n)
    # every real query distributes exactly 1: received attention sums to n per head
    # float32 probabilities: n rows of softmax outputs, each 1 within ~n·2⁻²⁴; n ≈ 40 sums of them: ≤ 1e-4
    assert torch.allclose(out["received"].sum(-1), torch.full((2, 2), float(n)), atol=1e-4)
    assert out["attended_idx"].shape == (2, 2, n, 4) and out["attended_idx"].dtype == torch.int32
    assert position_counts([3, 1, 2]).tolist() == [3, 2, 1]
