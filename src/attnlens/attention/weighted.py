"""Attention weighted by what flows through it, on the band: value norms (Kobayashi et al. 2020),
rollout (Abnar & Zuidema 2020) and gradient-weighted attention, never the ``n × n`` matrix.

The explanation methods built on them are described in :mod:`attnlens.attribution.explanations`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlens.attention import full
from attnlens.attention.band import CHUNK_BYTES, Band, received_attention

# --- band operations --------------------------------------------------------------------------------


def band_products(q: torch.Tensor, k: torch.Tensor, half: int) -> torch.Tensor:
    """``(h, n, 2·half + 1)`` with ``[h, i, s] = ⟨q[h, i], k[h, i + s − half]⟩`` (0 where the key is outside).

    The slot layout of a band's window attention. Computed in blocks of about ``half`` queries against
    their ``block + 2·half`` keys, so the working set stays under :data:`CHUNK_BYTES` whatever ``n`` is.
    """
    heads, n, _ = q.shape
    width = 2 * half + 1
    kp = torch.nn.functional.pad(k, (0, 0, half, half))
    out = q.new_zeros(heads, n, width)
    # blocks of about half a window: each product computes (block + 2·half) / (2·half + 1) times the band
    # it keeps, and a small block keeps that waste near 1.5 (blocks of n would be n / w times the work)
    block = max(1, min(n, max(16, half), CHUNK_BYTES // max(1, q.element_size() * heads * 3 * width)))
    for a in range(0, n, block):
        b = min(a + block, n)
        m = b - a
        prod = torch.matmul(q[:, a:b], kp[:, a : b + 2 * half].transpose(1, 2)).contiguous()  # (h, m, m + 2·half)
        out[:, a:b] = prod.as_strided((heads, m, width), (prod.stride(0), prod.stride(1) + 1, 1))
    return out


def _global_slots(like: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` ``(h, rows, n_b)`` zero-padded to the layout of a global attention tensor ``like`` ``(h, n_g, x)``."""
    out = like.new_zeros(like.shape)
    rows = min(out.shape[1], values.shape[1])
    out[:, :rows, : values.shape[2]] = values[:, :rows]
    return out


def value_norms(hidden: torch.Tensor, value: torch.nn.Linear, out_proj: torch.nn.Linear, heads: int) -> torch.Tensor:
    """``(heads, n)`` ``‖(x_j W_V^h + b_V^h) W_O^h‖``: the value vectors through the head's slice of ``W_O``."""
    v = value(hidden)  # (n, d)
    dim = v.shape[-1] // heads
    out = v.new_empty(heads, v.shape[0])
    for h in range(heads):
        cols = slice(h * dim, (h + 1) * dim)
        out[h] = torch.linalg.vector_norm(v[:, cols] @ out_proj.weight[:, cols].T, dim=-1)
    return out


def value_norm_received(band: Band, norm_local: torch.Tensor, norm_global: torch.Tensor | None) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i ‖A_ij f(x_j)‖``: local rows weighted by ``norm_local``, global rows by ``norm_global``."""
    if not isinstance(band, Band):  # a full layer: no global rows of their own
        out = full.received(band) * norm_local[:, : band.n]
        out[:, band.length :] = 0
        return out
    n, length, nb = band.n, band.length, band.n_global
    zero_global = None if band.global_ is None else torch.zeros_like(band.global_)
    local_rows = received_attention(Band(band.local, zero_global, length, band.global_positions))
    out = local_rows * norm_local[:, :n]
    if nb:
        out[:, :length] += band.global_[:, :length, :nb].sum(-1) * norm_global[:, :length]
    out[:, length:] = 0
    return out


def rollout(bands: Sequence[Band], start: int = 0) -> torch.Tensor:
    """``(n,)`` row ``start`` of ``Ã_L ⋯ Ã_1`` with ``Ã_l = ½ mean_h A_l + ½ I``, carried down as a vector."""
    n = bands[0].n
    r = torch.zeros(n, dtype=torch.float64, device=bands[0].device)
    r[start] = 1.0
    for band in reversed(bands):
        if not isinstance(band, Band):  # a full layer, by query blocks
            r = 0.5 * r + 0.5 * full.weighted_received(band, query_weight=r[None]).mean(0)
            continue
        local = band.local.mean(0, keepdim=True).double() * r[None, :, None]  # heads averaged first: O(n · w)
        glob = None
        if band.global_ is not None:
            weights = r.new_zeros(band.x)
            weights[: band.n_global] = r[band.global_positions]
            glob = band.global_.mean(0, keepdim=True).double() * weights
        moved = received_attention(Band(local, glob, band.length, band.global_positions))[0]
        r = 0.5 * r + 0.5 * moved
    return r


def grad_attention_received(
    band: Band, grad_out: torch.Tensor, value: torch.Tensor, value_global: torch.Tensor | None
) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i A_ij ⟨∂F/∂o_i, v_j⟩`` on the band.

    Args:
        grad_out: ``(heads, ≥ n, dh)`` gradient of ``F`` with respect to the head outputs ``o``.
        value, value_global: ``(heads, ≥ n, dh)`` value vectors (local rows and global rows).
    """
    if not isinstance(band, Band):
        return full.products_received(band, grad_out[:, : band.n], value)
    n, x, nb, half = band.n, band.x, band.n_global, band.half
    gpos = band.global_positions
    out = band.local.new_zeros(band.heads, n)
    per_head = 4 * n * band.slots * band.local.element_size()
    for hs in band.head_chunks(per_head):
        g, v = grad_out[hs, :n], value[hs, :n]
        grad_local = band.local.new_zeros(hs.stop - hs.start, n, band.slots)
        grad_local[:, :, x:] = band_products(g, v, half)
        glob = None
        if band.global_ is not None:
            if nb:
                grad_local[:, :, :nb] = torch.einsum("hnd,hgd->hng", g, v[:, gpos])
                rows = torch.einsum("hgd,hjd->hjg", grad_out[hs][:, gpos], value_global[hs])
                glob = band.global_[hs] * _global_slots(band.global_[hs], rows)
            else:
                glob = torch.zeros_like(band.global_[hs])
        chunk = Band(band.local[hs] * grad_local, glob, band.length, gpos)
        out[hs] = received_attention(chunk)
        del grad_local, chunk, glob
    return out
