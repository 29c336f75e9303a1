"""Top-k partners and received attention as tensor operations, on the device where the attention is.

The compiled kernels of :mod:`attnlens.attention.kernels` are the CPU's path: they stream a band or a block of
query rows once and keep a sorted buffer per row and per key. On a card the same summaries are taken here, where
the attention already lies, with the same semantics (:mod:`attnlens.attention.band`): the ``k`` partners of every
query and of every key ordered by ``(−score, position)``, only scores ``> 0`` reported (zero, negative and NaN
never), ``−1`` / ``0`` where fewer than ``k`` partners have one; pad queries and keys, local rows of global tokens
and window slots that point outside the text, at padding or at a global token excluded by index.

The selection (:func:`select_topk`) is exact: a candidate's score and position are packed into one integer key
whose order is ``(score, −position)`` — a positive float's bits order as its value does — so one ``topk`` of the
integers is the ordered top k, ties to the smaller position; the score is given back as it was. The kernels and
these functions therefore agree exactly on indices and values; received attention is summed in float64 in a
different order (equal to float64 rounding).
"""

from __future__ import annotations

import torch

#: The largest position a packed key can hold (:func:`select_topk`).
MAX_POSITION = 2**31 - 1


def on_device(layer) -> bool:
    """Whether a layer's attention (a band, a full layer: anything with a ``device``) is summarised here, off the
    CPU, rather than by the compiled kernels."""
    return layer.device.type != "cpu"


def select_topk(scores: torch.Tensor, positions: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest scores ``> 0`` of every row, ordered by ``(−score, position)``.

    Args:
        scores: ``(..., m)`` candidates' scores (any float dtype).
        positions: ``(..., m)`` (broadcast against ``scores``) their positions, ``−1`` for a candidate that does
            not count.
        k: partners per row.

    Returns:
        ``(positions, scores)``, each ``(..., k)``: int32 positions (−1 where fewer than ``k`` count) and the scores
        in their dtype (0 there).
    """
    positions = positions.expand_as(scores)
    m = scores.shape[-1]
    take = min(k, m)
    valid = (positions >= 0) & (scores > 0)  # NaN > 0 is False: never reported
    if scores.dtype == torch.float64:
        bits = scores.view(torch.int64)
        # float64 keeps its order only in 64 bits: order by position first, then a stable sort by score
        order = torch.where(valid, positions, MAX_POSITION).argsort(dim=-1, stable=True)
        ranked = torch.where(valid, bits, -1).gather(-1, order)
        top, where = ranked.sort(dim=-1, descending=True, stable=True)
        top, where = top[..., :take], order.gather(-1, where[..., :take])
    else:
        bits = scores.float().view(torch.int32).long()  # ≥ 0 for positive floats, in the floats' order
        key = torch.where(valid, (bits << 32) | (MAX_POSITION - positions.long()), -1)
        top, where = key.topk(take, -1)
    found = top >= 0
    idx = torch.where(found, positions.gather(-1, where), -1).to(torch.int32)
    val = torch.where(found, scores.gather(-1, where), 0)
    if take < k:
        idx = torch.nn.functional.pad(idx, (0, k - take), value=-1)
        val = torch.nn.functional.pad(val, (0, k - take), value=0)
    return idx, val


def _unfilled(band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(heads, n, k)`` tables with no partner yet: −1 and 0, on the band's device."""
    idx = torch.full((band.heads, band.n, k), -1, dtype=torch.int32, device=band.device)
    return idx, band.local.new_zeros(band.heads, band.n, k)


def band_topk_attended(band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attnlens.attention.band.topk_attended` on ``band``'s device: ``(heads, n, k)`` keys and scores."""
    idx, val = _unfilled(band, k)
    if k == 0 or band.length == 0:
        return idx, val
    keys = band.slot_keys.long()  # (n, slots): −1 for every slot of an unused row
    per_head = band.n * band.slots * 16  # the packed keys and their selection
    for hs in band.head_chunks(per_head):
        idx[hs], val[hs] = select_topk(band.local[hs], keys, k)
    real = torch.arange(band.n, device=band.device)
    real = torch.where(real < band.length, real, -1)
    for b, g in enumerate(band.global_positions.tolist()):  # a global token's row: every real key
        idx[:, g], val[:, g] = select_topk(band.global_[:, : band.n, b], real, k)
    return idx, val


def band_topk_attending(band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attnlens.attention.band.topk_attending` on ``band``'s device: ``(heads, n, k)`` queries and scores."""
    idx, val = _unfilled(band, k)
    if k == 0 or band.length == 0:
        return idx, val
    n, half, length, nb = band.n, band.half, band.length, band.n_global
    device = band.device
    gpos = band.global_positions.to(device).long()
    # a real non-global key c: the local rows of its window (query c − w/2 + k' at key-major slot k'), then the
    # global tokens' rows
    c = torch.arange(n, device=device)[:, None]
    query = c - half + torch.arange(band.window + 1, device=device)[None, :]
    ok = (query >= 0) & (query < length)
    ok &= band.query_ok[query.clamp(0, n - 1)] & ((c < length) & ~band.is_global[:, None])
    positions = torch.cat([torch.where(ok, query, -1), torch.where(c < length, gpos[None, :nb], -1).expand(n, nb)], 1)
    per_head = (n + band.window) * (band.window + 1) * band.local.element_size() + n * positions.shape[1] * 16
    for hs in band.head_chunks(per_head):
        scores = band.key_major(hs)
        if nb:
            scores = torch.cat([scores, band.global_[hs, :n, :nb]], 2)
        idx[hs], val[hs] = select_topk(scores, positions, k)
    # a global key g: every real local row through its global slot, and every global token's row
    if nb:
        rows = torch.where(band.query_ok, torch.arange(n, device=device), -1)
        positions = torch.cat([rows, gpos])
        for b, g in enumerate(gpos.tolist()):
            scores = torch.cat([band.local[:, :, b], band.global_[:, g, :nb]], 1)
            idx[:, g], val[:, g] = select_topk(scores, positions, k)
    idx[:, length:], val[:, length:] = -1, 0
    return idx, val


def full_summaries(layer, k: int | None) -> dict[str, torch.Tensor]:
    """:func:`attnlens.attention.full.summaries` on the layer's device: received attention ``(heads, n)`` (summed
    in float64) and, with ``k``, both top-k tables ``(heads, n, k)``, one pass over the blocks of query rows."""
    heads, n = layer.heads, layer.n
    device = layer.device
    received = torch.zeros(heads, n, dtype=torch.float64, device=device)
    if k is not None:
        rows_idx = torch.full((heads, n, k), -1, dtype=torch.int32, device=device)
        rows_val = torch.zeros(heads, n, k, dtype=layer.dtype, device=device)
        cols_idx, cols_val = rows_idx.clone(), rows_val.clone()
    with torch.no_grad():
        for start, stop, lo, probs in layer.reachable_blocks():
            width = probs.shape[-1]
            received[:, lo : lo + width] += probs.sum(1, dtype=torch.float64)
            if k is None:
                continue
            keys = torch.arange(lo, lo + width, device=device)
            rows_idx[:, start:stop], rows_val[:, start:stop] = select_topk(probs, keys, k)
            # every reached key's best queries so far (earlier blocks: smaller positions), and this block's rows
            queries = torch.arange(start, stop, device=device).expand(heads, width, -1)
            scores = torch.cat([cols_val[:, lo : lo + width], probs.transpose(1, 2).to(layer.dtype)], 2)
            positions = torch.cat([cols_idx[:, lo : lo + width].long(), queries], 2)
            cols_idx[:, lo : lo + width], cols_val[:, lo : lo + width] = select_topk(scores, positions, k)
    out = {"received": received.to(layer.dtype)}
    if k is not None:
        out |= {
            "attended_idx": rows_idx,
            "attended_val": rows_val,
            "attending_idx": cols_idx,
            "attending_val": cols_val,
        }
    return out
