"""The decoders' long-context attention (:mod:`attnlens.models.llama.causal_attention`) against dense references and
Hugging Face's own sdpa attention with its explicit masks (float64 throughout; its eager attention takes the softmax
in float32, 2e-8 away).

Bounds: float64 throughout, so the only difference is the order of the sums (the softmax over keys split between
kernels or blocks, the matrix products tiled otherwise): 1e-12 absolute on attention outputs of order 1 and on
logits of order 1–10, a few float64 ulps through two layers; the gradients the same.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

from attnlens.models import architecture
from attnlens.models.llama import causal_attention as attention
from tests.support.tiny_models import tiny_decoder

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

KINDS = ["llama", "mistral", "qwen2", "qwen3", "gemma3"]


def _qkv(q: int, n: int, seed: int, grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, m, 8, generator=g, dtype=torch.float64).requires_grad_(grad) for m in (q, n, n))


def _dense(query, key, value, scale: float, window: int | None = None) -> torch.Tensor:
    """Softmax attention under the explicit mask: query ``i`` is key ``i + n − q`` and sees keys ``j ≤ i + n − q``
    (and ``j > i + n − q − window``)."""
    q, n = query.shape[-2], key.shape[-2]
    at = torch.arange(q)[:, None] + n - q
    keys = torch.arange(n)[None, :]
    allowed = (keys <= at) & (keys > at - window if window is not None else True)
    scores = (scale * query @ key.transpose(-1, -2)).masked_fill(~allowed, -torch.inf)
    return torch.softmax(scores, -1) @ value


@pytest.mark.parametrize(("q", "n"), [(1, 9), (5, 9), (8, 9), (7, 40)])
def test_a_suffix_attends_to_the_prefix_and_causally_to_itself(q, n):
    """The two fused kernels merged by their log-sum-exps against PyTorch's own bottom-right causal bias (its mask
    materialised on a CPU) and the dense softmax."""
    query, key, value = _qkv(q, n, q * n)
    got = attention.bottom_right_causal(query, key, value, scale=0.3)
    bias = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=causal_lower_right(q, n), scale=0.3
    )
    torch.testing.assert_close(got, bias, rtol=0, atol=1e-12)
    torch.testing.assert_close(got, _dense(query, key, value, 0.3), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("q", "n", "window"), [(40, 40, 5), (40, 40, 39), (12, 40, 5), (1, 40, 7), (33, 40, 16)])
@pytest.mark.parametrize("block", [2, 3, 128])
def test_a_window_by_blocks_is_the_dense_windowed_attention(q, n, window, block, monkeypatch):
    """Blocks of 2, 3 or all the query rows (short last blocks, keys clipped at the first), the queries the keys or
    their last ``q``: outputs and the gradients of every input equal the dense windowed softmax's."""
    monkeypatch.setattr(attention, "MIN_BLOCK", block)
    query, key, value = _qkv(q, n, q + n + window, grad=True)
    got = attention.causal_attention(query, key, value, 0.3, window)
    dense = _dense(query, key, value, 0.3, window)
    torch.testing.assert_close(got, dense, rtol=0, atol=1e-12)
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for a, b in zip(
        torch.autograd.grad((got * weights).sum(), (query, key, value)),
        torch.autograd.grad((dense * weights).sum(), (query, key, value)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _alone(model, ids: list[int]) -> torch.Tensor:
    """One sequence, no padding, the model's own attention (Hugging Face's masks): its logits."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_decoder_under_long_context_gives_hugging_faces_logits_and_gradients(kind, monkeypatch):
    """Every family (windows of 5 keys, binding on 34 tokens; blocks of 2 query rows), a right-padded batch under
    :func:`~attnlens.models.llama.causal_attention.long_context` against each sequence alone under Hugging Face's sdpa:
    the logits of every real token, and the gradient of their sum at the embeddings. A batch with a masked token gets
    Hugging Face's mask, and equals the sequence without it at its own positions."""
    monkeypatch.setattr(attention, "MIN_BLOCK", 2)
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    g = torch.Generator().manual_seed(5)
    sequences = [torch.randint(5, 60, (k,), generator=g).tolist() for k in (34, 20)]
    ids = torch.zeros((2, 34), dtype=torch.long)
    mask = torch.zeros((2, 34), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.tensor(seq), 1
    embed = architecture(model).embeddings(model)
    with architecture(model).long_context(model):
        inputs = embed(ids).detach().requires_grad_(True)
        logits = model(inputs_embeds=inputs, attention_mask=mask).logits
    assert model.config._attn_implementation == "sdpa"
    for row, seq in enumerate(sequences):
        n = len(seq)
        torch.testing.assert_close(logits[row, :n], _alone(model, seq), rtol=0, atol=1e-12)
        (grad,) = torch.autograd.grad(logits[row, :n].sum(), inputs, retain_graph=True)
        alone = embed(torch.tensor([seq])).detach().requires_grad_(True)
        (expected,) = torch.autograd.grad(model(inputs_embeds=alone).logits.sum(), alone)
        torch.testing.assert_close(grad[row, :n], expected[0], rtol=0, atol=1e-12)
    keep = mask.clone()
    keep[0, 10] = 0  # a masked token: not right padding
    with torch.no_grad(), architecture(model).long_context(model):
        masked = model(input_ids=ids, attention_mask=keep).logits
    with torch.no_grad():
        torch.testing.assert_close(masked, model(input_ids=ids, attention_mask=keep).logits, rtol=0, atol=1e-12)
    if architecture(model).windows(model.config) == [None, None]:  # a window counts the tokens present
        kept = [i for i in range(34) if i != 10]
        expected = model(input_ids=ids[:1, kept], position_ids=torch.tensor([kept])).logits[0]
        torch.testing.assert_close(masked[0, kept], expected.detach(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_only_causality_windows_and_right_padding_skip_the_mask(kind, monkeypatch):
    """The mask interface gives no mask for no padding and right padding, Hugging Face's for a masked token and for
    left padding; the attention runs attnlens's causal path exactly where it got none."""
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    given: list[bool] = []
    original = attention.causal_attention
    monkeypatch.setattr(attention, "causal_attention", lambda *a, **k: given.append(True) or original(*a, **k))
    layers = len(architecture(model).layers(model))
    ids = torch.randint(5, 60, (2, 12), generator=torch.Generator().manual_seed(0))
    for mask, ours in (
        (None, True),
        ([[1] * 12, [1] * 8 + [0] * 4], True),
        ([[1] * 12, [1] * 5 + [0] + [1] * 6], False),
        ([[1] * 12, [0] * 4 + [1] * 8], False),
    ):
        given.clear()
        with torch.no_grad(), architecture(model).long_context(model):
            model(input_ids=ids, attention_mask=None if mask is None else torch.tensor(mask))
        assert len(given) == (layers if ours else 0), mask
