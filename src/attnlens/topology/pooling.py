"""A text's attention pooled into units, from a band or from dense attention, and one text's topology under any
encoder (the method: :mod:`attnlens.topology`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy import sparse

from attnlens.attention.band import Band
from attnlens.attention.layers import layer_slice
from attnlens.data.tokens import display_tokens, structural_mask
from attnlens.topology.persistence import example_topology

POOLINGS = ("chunks", "sentences", "none")


SENTENCE_END = frozenset({".", "!", "?"})


def units(surfaces: Sequence[str], special: np.ndarray, pooling: str, chunk_size: int) -> np.ndarray:
    """``(n,)`` unit index of every token (``−1`` for special tokens), units numbered from 0 in text order.

    Args:
        surfaces: the tokens' surface strings (for sentence boundaries).
        special: ``(n,)`` bool, tokens left out.
        pooling: ``chunks`` (``chunk_size`` consecutive kept tokens), ``sentences`` (a new unit after
            every ``.``, ``!``, ``?`` token) or ``none`` (one unit per kept token).
    """
    kept = np.flatnonzero(~np.asarray(special, dtype=bool))
    out = np.full(len(special), -1, dtype=np.int64)
    if pooling == "none":
        out[kept] = np.arange(len(kept))
    elif pooling == "chunks":
        out[kept] = np.arange(len(kept)) // chunk_size
    elif pooling == "sentences":
        unit, _started = 0, False
        for i in kept:
            out[i] = unit
            if surfaces[i] in SENTENCE_END:
                unit, _started = unit + 1, False
    else:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {POOLINGS}")
    return out


def unit_frequencies(input_ids: Sequence[int], unit_of: np.ndarray) -> np.ndarray:
    """``f_I``: mean over the unit's tokens of their type's relative frequency among the kept tokens."""
    ids = np.asarray(input_ids)
    kept = unit_of >= 0
    _, inverse, counts = np.unique(ids[kept], return_inverse=True, return_counts=True)
    freq = counts[inverse] / kept.sum()
    m = int(unit_of.max()) + 1
    return np.bincount(unit_of[kept], weights=freq, minlength=m) / np.bincount(unit_of[kept], minlength=m)


def pooled_from_dense(attentions: np.ndarray, unit_of: np.ndarray) -> np.ndarray:
    """``(L, H, m, m)`` pooled attention from dense ``(L, H, n, n)`` attention (rows = queries)."""
    m = int(unit_of.max()) + 1
    kept = np.flatnonzero(unit_of >= 0)
    onehot = np.zeros((len(kept), m))
    onehot[np.arange(len(kept)), unit_of[kept]] = 1.0
    a = np.asarray(attentions, dtype=np.float64)[:, :, kept][:, :, :, kept]
    pooled = np.einsum("iI,lhij,jJ->lhIJ", onehot, a, onehot, optimize=True)
    return pooled / onehot.sum(0)[:, None]


def dense_attentions(model, batch: dict) -> np.ndarray:
    """``(L, H, n, n)`` float64 attention of the first example of ``batch`` from any Hugging Face encoder.

    Switches the model to eager attention when needed (SDPA and flash kernels return no weights) and
    drops the padding.
    """
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    if not out.attentions:
        raise ValueError(f"{type(model).__name__} returned no attention weights")
    n = int(batch["attention_mask"][0].sum()) if "attention_mask" in batch else out.attentions[0].shape[-1]
    return torch.stack([a[0, :, :n, :n] for a in out.attentions]).double().numpy()


def pooled_from_bands(bands, unit_of: np.ndarray) -> np.ndarray:
    """``(L, H, m, m)`` pooled attention summed from bands (one :class:`~attnlens.attention.band.Band` per layer).

    Every attention weight ``A[i, j]`` the band holds — window slots, the local rows' global slots
    and the global tokens' rows — is added to cell ``(unit(i), unit(j))`` with one sparse product per
    layer (all heads at once); nothing of size ``n × n`` is formed.
    """
    m = int(unit_of.max()) + 1
    counts = np.bincount(unit_of[unit_of >= 0], minlength=m).astype(np.float64)
    if not all(isinstance(b, Band) and b.slots == bands[0].slots for b in bands):
        return _pooled_by_blocks(bands, unit_of, m) / counts[:, None]
    first = bands[0]
    n, length = first.n, first.length
    keys = first.slot_keys.numpy().astype(np.int64)  # (n, slots), −1 = unused
    unit_pad = np.append(unit_of, -1)  # index −1 → −1
    uq = np.broadcast_to(unit_pad[np.minimum(np.arange(n), len(unit_of))][:, None], keys.shape)
    uk = unit_pad[np.where(keys >= 0, np.minimum(keys, len(unit_of)), len(unit_of))]
    ok = (keys >= 0) & (uq >= 0) & (uk >= 0)
    local_cols = sparse.csr_matrix(
        (np.ones(int(ok.sum())), (np.flatnonzero(ok.ravel()), (uq * m + uk)[ok])), shape=(keys.size, m * m)
    )
    gpos = first.global_positions.numpy()
    glob_rows = []
    for b, g in enumerate(gpos):
        if g < len(unit_of) and unit_of[g] >= 0:
            keys_g = np.flatnonzero(unit_of[:length] >= 0)
            glob_rows.append((b, keys_g, unit_of[g] * m + unit_of[keys_g]))
    out = np.zeros((len(bands), first.heads, m * m))
    for layer, band in enumerate(bands):
        local = band.local.double().numpy().reshape(band.heads, -1)
        out[layer] = (local @ local_cols).reshape(band.heads, -1) if ok.any() else 0.0
        for b, keys_g, cells in glob_rows:
            w = band.global_[:, keys_g, b].double().numpy()
            for h in range(band.heads):
                out[layer, h] += np.bincount(cells, weights=w[h], minlength=m * m)
    return out.reshape(len(bands), first.heads, m, m) / counts[:, None]


def _pooled_by_blocks(layers, unit_of: np.ndarray, m: int) -> np.ndarray:
    """``(L, H, m, m)`` pooled sums for layers of different forms (a band, a full layer kept as queries and keys):
    each layer's dense rows formed by query blocks and summed into unit cells."""
    n = layers[0].n
    units = np.full(n, m, dtype=np.int64)  # positions of no unit go to a spill cell, dropped at the end
    units[: min(n, len(unit_of))] = np.where(unit_of[:n] >= 0, unit_of[:n], m)
    units = torch.from_numpy(units)
    out = np.zeros((len(layers), layers[0].heads, m, m))
    for index, layer in enumerate(layers):
        cells = torch.zeros(layer.heads, m + 1, m + 1, dtype=torch.float64)
        for start, stop, probs in layer.blocks():
            by_key = probs.new_zeros(layer.heads, stop - start, m + 1).index_add_(2, units, probs)
            cells.index_add_(1, units[start:stop], by_key.double())
        out[index] = cells[:, :m, :m].numpy()
    return out


def text_topology(
    model, tokenizer, text: str, cfg, max_length: int | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray, dict, float]]:
    """``estimator → (MI, distance, diagrams, cap)`` of one text under a dense Hugging Face encoder."""
    batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=max_length)
    dense = dense_attentions(model, dict(batch))
    ids = batch["input_ids"][0].tolist()
    special = structural_mask(tokenizer, ids)
    unit_of = units(display_tokens(tokenizer, ids), special, cfg.pooling, cfg.chunk_size)
    if unit_of.max() < 1:
        raise ValueError(f"text of {len(ids)} tokens gives fewer than 2 units with pooling {cfg.pooling!r}")
    pooled = pooled_from_dense(dense[layer_slice(len(dense), cfg.layers)], unit_of)
    return example_topology(pooled, unit_frequencies(ids, unit_of), cfg)
