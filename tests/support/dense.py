"""Dense references: attention written out as ``heads × n × n`` matrices (from bands, from full layers, by hand
from a layer's weights), random bands and layers to feed them, and the numbers derived from them, against which the
band-native code is checked."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlens.attention.band import Band
from attnlens.attention.full import FullLayer
from attnlens.render.explorer import ExplorerDocument, compute_views


def dense_reference(band: Band) -> torch.Tensor:
    """``(heads, n, n)`` float64 dense attention, by a loop over queries."""
    local, glob = band.local.double(), band.global_
    heads, n, _ = local.shape
    gpos = band.global_positions.tolist()
    x, half, length = band.x, band.window // 2, band.length
    dense = torch.zeros(heads, n, n, dtype=torch.float64)
    for i in range(length):
        if i in gpos:
            dense[:, i, :length] = glob[:, :length, gpos.index(i)].double()
            continue
        for j, g in enumerate(gpos):
            dense[:, i, g] = local[:, i, j]
        for k in range(band.window + 1):
            c = i + k - half
            if 0 <= c < length and c not in gpos:
                dense[:, i, c] += local[:, i, x + k]
    return dense


def random_band(heads, n, length, window, gpos, x, seed, dtype=torch.float32) -> Band:
    """A band laid out like Longformer's, with integer-valued weights (ties, zeros) and garbage elsewhere."""
    g = torch.Generator().manual_seed(seed)
    half = window // 2
    local = torch.rand(heads, n, x + window + 1, generator=g, dtype=torch.float64) * 3  # garbage everywhere
    n_pad = math.ceil(n / max(window, 1)) * max(window, 1) + window
    glob = torch.rand(heads, n_pad, x, generator=g, dtype=torch.float64) * 3 if x else None
    for i in range(length):
        if i in gpos:
            continue
        valid = [j for j in range(len(gpos))]
        valid += [x + k for k in range(window + 1) if 0 <= i + k - half < length and i + k - half not in gpos]
        raw = torch.randint(0, 4, (heads, len(valid)), generator=g).double()
        raw[:, 0] += 1  # every row has some weight
        local[:, i, valid] = raw / raw.sum(1, keepdim=True)
    for j in range(len(gpos)):
        raw = torch.randint(0, 4, (heads, length), generator=g).double()
        raw[:, 0] += 1
        glob[:, :length, j] = raw / raw.sum(1, keepdim=True)
    return Band(local.to(dtype), None if glob is None else glob.to(dtype), length, torch.tensor(gpos, dtype=torch.long))


CASES = [
    # heads, n, length, window, global positions, x
    (3, 13, 13, 4, [0], 1),
    (2, 19, 15, 4, [3], 1),
    (2, 21, 17, 8, [0, 7], 2),
    (3, 23, 23, 2, [2, 5, 11], 3),
    (2, 17, 12, 8, [4], 3),  # fewer globals than global slots (another batch item had 3)
    (2, 11, 9, 16, [1, 6], 2),  # window wider than the input
    (2, 14, 10, 6, [], 0),  # no global token at all
    (1, 9, 1, 4, [0], 1),  # a single real token
]


def reference_topk(dense: torch.Tensor, k: int, length: int, axis: str):
    heads, n, _ = dense.shape
    idx = torch.full((heads, n, k), -1, dtype=torch.long)
    val = torch.zeros(heads, n, k, dtype=torch.float64)
    for h in range(heads):
        for p in range(length):
            line = dense[h, p, :length] if axis == "row" else dense[h, :length, p]
            ranked = sorted((-float(v), j) for j, v in enumerate(line.tolist()) if v > 0)[:k]
            for r, (neg, j) in enumerate(ranked):
                idx[h, p, r], val[h, p, r] = j, -neg
    return idx, val


def independent_attention(model, hidden_states, attention_mask, global_mask):
    """Full softmax attention per layer from the layer's input: local Q/K for ordinary queries,
    global Q/K for global queries; padding keys excluded. ``(layers, batch, heads, n, n)``."""
    out = []
    for layer, h in zip(model.encoder.layer, hidden_states[:-1], strict=True):
        att = layer.attention.self
        b, n, _ = h.shape
        nh, hd = att.num_heads, att.head_dim

        def split(t, nh=nh, hd=hd, b=b, n=n):
            return t.view(b, n, nh, hd).transpose(1, 2)

        q, k = split(att.query(h)) / math.sqrt(hd), split(att.key(h))
        qg, kg = split(att.query_global(h)) / math.sqrt(hd), split(att.key_global(h))
        key_pad = (attention_mask == 0)[:, None, None, :]
        local = (q @ k.transpose(-1, -2)).masked_fill(key_pad, float("-inf")).softmax(-1)
        glob = (qg @ kg.transpose(-1, -2)).masked_fill(key_pad, float("-inf")).softmax(-1)
        is_global = (global_mask == 1)[:, None, :, None]
        probs = torch.where(is_global, glob, local)
        probs = probs.masked_fill((attention_mask == 0)[:, None, :, None], 0.0)
        out.append(probs)
    return torch.stack(out)


def random_full(heads: int, n: int, length: int, seed: int, d: int = 5) -> FullLayer:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(heads, n, d, generator=g, dtype=torch.float64)
    return FullLayer(q, k, length)


#: (query heads, key heads, n, length, window): grouped and not, padded and not, windows shorter and longer than n
CAUSAL = [(4, 2, 19, 19, None), (4, 1, 17, 12, 5), (3, 3, 16, 16, 1), (2, 1, 9, 9, 40), (6, 2, 21, 14, 8)]


def random_causal(heads, key_heads, n, length, window, seed, d: int = 4) -> FullLayer:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(heads, n, d, generator=g, dtype=torch.float64)
    k = torch.randn(key_heads, n, d, generator=g, dtype=torch.float64)
    return FullLayer(q, k, length, causal=True, window=window)


def dense_rollout(dense, start: int):
    """Attention rollout written out on dense ``(heads, n, n)`` matrices, the first layer's last: the one-hot row of
    ``start`` carried down through ``½ · r + ½ · r · mean_h A`` layer by layer (Abnar & Zuidema with the residual
    half), float64."""
    r = torch.zeros(dense[0].shape[-1], dtype=torch.float64)
    r[start] = 1
    for a in reversed(dense):
        r = 0.5 * r + 0.5 * (r @ a.mean(0))
    return r


def assert_grad_attention_is_dense(model, batch, dense, target: int, atol: float) -> None:
    """Gradient-weighted attention ``Σ_i A_ij ⟨∂F/∂o_i, v_j⟩`` of every layer, read through the model seam (its value
    projections, one value vector per query head), against the dense ``(heads, n, n)`` matrices ``dense`` (1e-6
    relative: float32 softmaxes in the references; ``atol`` the caller's)."""
    from attnlens.attention.weighted import grad_attention_received  # noqa: PLC0415 (Captum, through these: only two tests need them)
    from attnlens.attribution.explanations import gradient_pass  # noqa: PLC0415
    from attnlens.models import architecture  # noqa: PLC0415

    arch, heads = architecture(model), model.config.num_attention_heads
    grads = gradient_pass(model, batch, target=target, attentions=True)
    for block, layer, h, g, a in zip(
        arch.layers(model), grads.bands, grads.hidden, grads.output_grads, dense, strict=True
    ):
        n = h.shape[0]
        v = arch.value_projections(block)["local"](h).view(n, heads, -1).transpose(0, 1)
        gh = g.view(n, heads, -1).transpose(0, 1)
        expected = (a * (gh @ v.transpose(1, 2))).sum(1)
        torch.testing.assert_close(grad_attention_received(layer, gh, v, v), expected, rtol=1e-6, atol=atol)


def explorer_document(tokens, n_layers=2, heads=2):
    n = len(tokens)
    bands = [random_band(heads, n, n, 4, [0], 1, seed=s) for s in range(n_layers)]
    importance = torch.rand(n_layers, heads, generator=torch.Generator().manual_seed(3))
    return ExplorerDocument(
        example_id="ex/1",
        title="ex <1> & co",
        info={
            "label": "a",
            "prediction": "b",
            "outputs": {"a": 0.4, "b": 0.6},
            "explained": "b",
            "ig_steps": 8,
            "ig_delta": 1e-3,
            "roles": ["x"],
        },
        tokens=tokens,
        starts_word=[True] * n,
        special=np.array([i == 0 for i in range(n)]),
        attribution=np.linspace(-1, 1, n).astype(np.float32),
        evidence=np.array([i % 3 == 0 for i in range(n)]),
        importance=importance.numpy(),
        views=compute_views(bands, importance, 2),
        provenance={"schema": "explorer/v2", "git_commit": "abc"},
    )
