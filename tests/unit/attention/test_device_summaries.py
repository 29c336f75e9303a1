"""The attention summaries as tensor operations (:mod:`attnlens.attention.topk`, the path a card takes) against the
compiled kernels (the CPU's path) and against sorted references: the same indices and the same values, exactly, on
bands (Longformer's layouts, global tokens or none, padding, a window wider than the text), full layers (ModernBERT's
global ones, decoders' causal ones with and without a window, grouped key heads) and hostile scores (ties, zeros,
negatives, NaN, infinity)."""

from __future__ import annotations

import math

import pytest
import torch

from attnlens.attention import full, topk
from attnlens.attention.band import Band, topk_attended, topk_attending
from attnlens.attention.full import FullLayer
from attnlens.attention.summaries import compute_example_summaries
from attnlens.attention.topk import band_topk_attended, band_topk_attending, full_summaries, select_topk
from attnlens.models import forward_bands
from tests.support.dense import CASES, CAUSAL, random_band, random_causal, random_full
from tests.support.tiny_models import bigbird_batch, tiny_bigbird, tiny_decoder, tiny_longformer, tiny_modernbert


def _sorted_reference(scores: torch.Tensor, positions: torch.Tensor, k: int):
    """Python's sort of ``(−score, position)`` over the candidates that count (score > 0, position ≥ 0)."""
    flat_s, flat_p = scores.reshape(-1, scores.shape[-1]), positions.expand_as(scores).reshape(-1, scores.shape[-1])
    idx = torch.full((flat_s.shape[0], k), -1, dtype=torch.int32)
    val = torch.zeros(flat_s.shape[0], k, dtype=scores.dtype)
    for r in range(flat_s.shape[0]):
        ranked = sorted(
            (-s, p) for s, p in zip(flat_s[r].tolist(), flat_p[r].tolist(), strict=True) if p >= 0 and s > 0
        )
        for c, (neg, p) in enumerate(ranked[:k]):
            idx[r, c], val[r, c] = p, -neg
    return idx.reshape(*scores.shape[:-1], k), val.reshape(*scores.shape[:-1], k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 4, 30])
def test_select_topk_orders_by_score_then_position_and_reports_only_positive_scores(dtype, k):
    g = torch.Generator().manual_seed(3)
    scores = torch.randint(-2, 4, (5, 7, 20), generator=g).to(dtype) / 4  # ties, zeros and negatives
    scores[0, 0, 3], scores[1, 2, 5], scores[2, 1, 0] = math.nan, math.inf, -math.inf
    positions = torch.randperm(40, generator=g)[:20]
    positions[[2, 11]] = -1  # candidates that do not count
    idx, val = select_topk(scores, positions, k)
    ref_idx, ref_val = _sorted_reference(scores, positions, k)
    assert torch.equal(idx, ref_idx) and torch.equal(val, ref_val) and val.dtype == dtype


def _hostile(band: Band) -> Band:
    """The band with a NaN, an infinity, a negative score and a zero in its used slots and global rows."""
    local = band.local.clone()
    local[0, 0, -1], local[0, 1, -2], local[-1, band.length - 1, band.x] = math.nan, -0.25, math.inf
    glob = None if band.global_ is None else band.global_.clone()
    if glob is not None:
        glob[0, 0, 0], glob[-1, band.length - 1, 0] = math.nan, 0.0
    return Band(local, glob, band.length, band.global_positions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_band_topk_equals_the_compiled_kernels(case, dtype):
    band = random_band(*CASES[case], seed=case, dtype=dtype)
    for layer in (band, _hostile(band)):
        for k in (1, 3, 40):
            for kernel, tensors in ((topk_attended, band_topk_attended), (topk_attending, band_topk_attending)):
                idx, val = tensors(layer, k)
                ref_idx, ref_val = kernel(layer, k)
                assert torch.equal(idx, ref_idx), (kernel.__name__, k)
                assert torch.equal(val, ref_val), (kernel.__name__, k)  # NaN is never reported: no NaN to compare


FULL = [random_full(3, 11, 9, 1), random_full(2, 13, 13, 2)] + [
    random_causal(*case, seed=s) for s, case in enumerate(CAUSAL)
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layer", range(len(FULL)))
def test_full_layer_summaries_equal_the_compiled_kernel(layer, dtype, monkeypatch):
    """Blocks of 3 queries (so that a key's queries come from several blocks and are merged), every k."""
    base = FULL[layer]
    layer = FullLayer(base.query.to(dtype), base.key.to(dtype), base.length, base.causal, base.window)
    monkeypatch.setattr(full, "BLOCK_BYTES", 2 * layer.heads * layer.n * layer.query.element_size() * 3)
    for k in (None, 1, 3, 40):
        ref, got = full.summaries(layer, k), full_summaries(layer, k)
        assert set(got) == set(ref)
        # received: both float64 sums of ≤ 21 probabilities in another order, then the layer's dtype: float64
        # rounding of sums ≤ 21 (≤ 21 · 2⁻⁵³ · 21 ≈ 5e-14), exact after rounding to float32 but for ties of rounding
        tol = 1e-13 if dtype == torch.float64 else 2**-23
        torch.testing.assert_close(got["received"], ref["received"], rtol=tol, atol=tol)
        for key in set(ref) - {"received"}:
            assert torch.equal(got[key], ref[key]), (key, k)


def _ids(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(n))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


#: Per architecture, a tiny model and one example's batch: bands with a global token (Longformer), blocks (BigBird),
#: bands and full layers (ModernBERT), causal layers with and without a window (Llama, Gemma 3).
MODELS = {
    "longformer": lambda: (
        tiny_longformer(hidden=16, heads=2, window=4, num_labels=2),
        _ids(23) | {"global_attention_mask": (torch.arange(23) == 0).long()[None]},
    ),
    "bigbird": lambda: (tiny_bigbird(), {k: v[:1] for k, v in bigbird_batch(150).items()}),
    "modernbert": lambda: (tiny_modernbert(), _ids(23)),
    "llama": lambda: (tiny_decoder("llama"), _ids(17)),
    "gemma3": lambda: (tiny_decoder("gemma3"), _ids(17)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_models_summaries_are_the_same_on_either_path(name, monkeypatch):
    """Every layer of a real forward summarised by the tensor path (forced here on the CPU, as a card takes it) and
    by the compiled kernels: the same top-k tables exactly, received attention to float64 rounding."""
    model, batch = MODELS[name]()
    bands = forward_bands(model, batch)
    kernels = compute_example_summaries(bands, k=5)
    monkeypatch.setattr(topk, "on_device", lambda layer: True)
    tensors = compute_example_summaries(bands, k=5)
    for key in ("attended_idx", "attended_val", "attending_idx", "attending_val"):
        assert torch.equal(tensors[key], kernels[key]), key
    # float32 received attention: sums of ≤ 23 probabilities in float64 in two orders, rounded to float32 once each
    torch.testing.assert_close(tensors["received"], kernels["received"], rtol=2**-23, atol=2**-23)
