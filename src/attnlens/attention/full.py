"""Full attention kept as its queries and keys, reduced by query blocks: never the ``heads × n × n`` tensor.

A layer of full attention (ModernBERT's global layers) is stored as :class:`FullLayer`: the layer's scaled
(and rotated) queries and its keys, ``O(heads · n · d)``. Every summary the band gives
(:mod:`attnlens.attention.band`) — received attention, top-k partners both ways, binned maps, and the weighted
ones of :mod:`attnlens.attention.weighted` — is computed here by blocks of queries: a block's
``(heads, block, n)`` probabilities are formed, reduced and dropped, the block sized so that they stay under
:data:`~attnlens.attention.band.CHUNK_BYTES`. The results follow the band's semantics exactly: pad queries and
pad keys are excluded, top-k ties go to the smaller position, partners of score 0 are not reported (−1).

The functions of :mod:`attnlens.attention.band` and :mod:`attnlens.attention.weighted` accept a
:class:`FullLayer` (or a :class:`Combination` of layers of different forms) wherever they accept a band, and
come here. The functions below take anything with ``heads``, ``n``, ``length``, ``dtype`` and ``blocks()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

#: Working memory of one block of probabilities, in bytes.
BLOCK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class FullLayer:
    """One example's full attention at one layer, as its queries and keys.

    Attributes:
        query: ``(heads, n, d)`` queries as the layer scores them (scaled by ``1/√d``, rotated where the model
            rotates them); ``n`` = tensor length, padding included.
        key: ``(heads, n, d)`` keys.
        length: real tokens, the first ``length`` positions.
    """

    query: torch.Tensor
    key: torch.Tensor
    length: int

    def __post_init__(self) -> None:
        if self.query.dim() != 3 or self.query.shape != self.key.shape:
            raise ValueError(f"queries {tuple(self.query.shape)} and keys {tuple(self.key.shape)} must be (H, n, d)")
        if not 0 <= self.length <= self.n:
            raise ValueError(f"length {self.length} outside [0, {self.n}]")

    @property
    def heads(self) -> int:
        return self.query.shape[0]

    @property
    def n(self) -> int:
        return self.query.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.query.dtype

    #: A full layer has no global tokens of a band (every token attends to every other).
    n_global = 0

    def detach(self) -> FullLayer:
        return FullLayer(self.query.detach(), self.key.detach(), self.length)

    def cpu(self) -> FullLayer:
        return FullLayer(self.query.cpu(), self.key.cpu(), self.length)

    def block_rows(self) -> int:
        """Queries per block: a block's ``(heads, rows, n)`` probabilities (and a copy) fit :data:`BLOCK_BYTES`."""
        per_row = 2 * self.heads * max(self.n, 1) * self.query.element_size()
        return max(1, min(self.length or 1, BLOCK_BYTES // per_row))

    def probabilities(self, start: int, stop: int) -> torch.Tensor:
        """``(heads, stop − start, n)`` attention of queries ``start … stop − 1`` (real ones) over every key; pad
        keys get 0."""
        length = self.length
        scores = self.query[:, start:stop] @ self.key[:, :length].transpose(1, 2)
        probs = torch.softmax(scores, -1)
        if length < self.n:
            probs = torch.nn.functional.pad(probs, (0, self.n - length))
        return probs

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(start, stop, probabilities)`` for consecutive blocks of the real queries."""
        step = self.block_rows()
        for start in range(0, self.length, step):
            stop = min(start + step, self.length)
            yield start, stop, self.probabilities(start, stop)

    def dense(self) -> torch.Tensor:
        """``(heads, n, n)`` — for tests and short inputs only."""
        out = self.query.new_zeros(self.heads, self.n, self.n)
        for start, stop, probs in self.blocks():
            out[:, start:stop] = probs
        return out


@dataclass(frozen=True)
class Combination:
    """``Σ_{l,h} w[l, h] · A[l, h]`` as one single-head layer, whatever each layer's form (band or full): the
    weighted attention of a layer configuration, formed by query blocks (explorer views)."""

    layers: tuple
    weights: torch.Tensor  # (L, H)

    @property
    def heads(self) -> int:
        return 1

    @property
    def n(self) -> int:
        return self.layers[0].n

    @property
    def length(self) -> int:
        return self.layers[0].length

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def probabilities(self, start: int, stop: int) -> torch.Tensor:
        out = torch.zeros(1, stop - start, self.n)
        for layer, w in zip(self.layers, self.weights, strict=True):
            if bool(w.any()):
                out[0] += torch.einsum("h,hbn->bn", w.float(), layer.probabilities(start, stop).float())
        return out

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        heads = max(layer.heads for layer in self.layers)
        step = max(1, min(self.length or 1, BLOCK_BYTES // (4 * (heads + 1) * max(self.n, 1))))
        for start in range(0, self.length, step):
            stop = min(start + step, self.length)
            yield start, stop, self.probabilities(start, stop)


def received(layer: FullLayer) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i A[i, j]`` (pad keys 0)."""
    out = torch.zeros(layer.heads, layer.n, dtype=layer.dtype)
    for _, _, probs in layer.blocks():
        out += probs.sum(1)
    return out


def weighted_received(layer: FullLayer, query_weight: torch.Tensor | None = None,
                      key_weight: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``(heads, n)`` ``Σ_i w_i A[i, j] u_j``, per-query ``w`` and per-key ``u`` each ``(heads | 1, n)``."""
    dtype = layer.dtype if query_weight is None else torch.promote_types(layer.dtype, query_weight.dtype)
    out = torch.zeros(layer.heads, layer.n, dtype=dtype)
    for start, stop, probs in layer.blocks():
        if query_weight is not None:
            probs = probs * query_weight[:, start:stop, None]
        out += probs.sum(1)
    return out if key_weight is None else out * key_weight


def products_received(layer: FullLayer, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i A[i, j] ⟨left_i, right_j⟩`` (gradient-weighted attention: ``∂F/∂o`` and ``v``)."""
    out = torch.zeros(layer.heads, layer.n, dtype=layer.dtype)
    for start, stop, probs in layer.blocks():
        out += (probs * (left[:, start:stop] @ right[:, : layer.n].transpose(1, 2))).sum(1)
    out[:, layer.length :] = 0
    return out


def _topk_by_position(values: torch.Tensor, k: int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest of ``values`` along the last axis ordered by ``(−value, position)``; ``positions`` gives
    each column's position (ascending). Ties (rare) are settled by a stable sort of the rows that have them."""
    m = min(k + 1, values.shape[-1])
    val, col = values.topk(m, dim=-1)
    tied = (val[..., 1:] == val[..., :-1]).any(-1)
    if bool(tied.any()):
        s_val, s_col = torch.sort(values[tied], dim=-1, descending=True, stable=True)
        val[tied], col[tied] = s_val[..., :m], s_col[..., :m]
    return val[..., :k], positions[col[..., :k]]


def _finish(val: torch.Tensor, idx: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to ``k`` places, and report partners of score 0 as −1 / 0 (the band's convention)."""
    if val.shape[-1] < k:
        pad = k - val.shape[-1]
        val = torch.nn.functional.pad(val, (0, pad))
        idx = torch.nn.functional.pad(idx, (0, pad), value=-1)
    idx = torch.where(val > 0, idx, -1)
    return val.masked_fill(idx < 0, 0), idx.to(torch.int32)


def summaries(layer: FullLayer, k: int | None) -> dict[str, torch.Tensor]:
    """Received attention and, with ``k``, both top-k tables, from one pass over the query blocks (what
    :func:`received`, :func:`topk_attended` and :func:`topk_attending` give, for a third of the work)."""
    out = {"received": torch.zeros(layer.heads, layer.n, dtype=layer.dtype)}
    if k is None:
        out["received"] = received(layer)
        return out
    length = layer.length
    att_idx = torch.full((layer.heads, layer.n, k), -1, dtype=torch.int32)
    att_val = torch.zeros(layer.heads, layer.n, k, dtype=layer.dtype)
    best_val = best_idx = None
    positions = torch.arange(length)
    for start, stop, probs in layer.blocks():
        out["received"] += probs.sum(1)
        real = probs[..., :length]
        v, i = _finish(*_topk_by_position(real, k, positions), k)
        att_val[:, start:stop], att_idx[:, start:stop] = v, i
        v, i = _topk_by_position(real.transpose(1, 2), k, torch.arange(start, stop))
        if best_val is not None:
            both_val, both_idx = torch.cat((best_val, v), -1), torch.cat((best_idx, i), -1)
            v, order = _topk_by_position(both_val, k, torch.arange(both_val.shape[-1]))
            i = torch.gather(both_idx, -1, order)
        best_val, best_idx = v, i
    ing_idx = torch.full((layer.heads, layer.n, k), -1, dtype=torch.int32)
    ing_val = torch.zeros(layer.heads, layer.n, k, dtype=layer.dtype)
    if best_val is not None and k:
        ing_val[:, :length], ing_idx[:, :length] = _finish(best_val, best_idx, k)
    out.update(attended_idx=att_idx, attended_val=att_val, attending_idx=ing_idx, attending_val=ing_val)
    return out


def topk_attended(layer: FullLayer, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query the ``k`` keys it attends to most: ``(keys, scores)``, each ``(heads, n, k)``."""
    idx = torch.full((layer.heads, layer.n, k), -1, dtype=torch.int32)
    val = torch.zeros(layer.heads, layer.n, k, dtype=layer.dtype)
    if k == 0:
        return idx, val
    positions = torch.arange(layer.length)
    for start, stop, probs in layer.blocks():
        v, i = _topk_by_position(probs[..., : layer.length], k, positions)
        v, i = _finish(v, i, k)
        val[:, start:stop], idx[:, start:stop] = v, i
    return idx, val


def topk_attending(layer: FullLayer, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every key the ``k`` queries attending to it most: ``(queries, scores)``, each ``(heads, n, k)``.

    A running top-k over the query blocks: each block's candidates are merged with the best so far, which
    come first (smaller positions) so that ties keep going to the smaller query.
    """
    idx = torch.full((layer.heads, layer.n, k), -1, dtype=torch.int32)
    val = torch.zeros(layer.heads, layer.n, k, dtype=layer.dtype)
    if k == 0 or layer.length == 0:
        return idx, val
    length = layer.length
    best_val = best_idx = None
    for start, stop, probs in layer.blocks():
        cols = probs[..., :length].transpose(1, 2)  # (H, keys, block)
        v, i = _topk_by_position(cols, k, torch.arange(start, stop))
        if best_val is not None:
            both_val, both_idx = torch.cat((best_val, v), -1), torch.cat((best_idx, i), -1)
            order_val, order = _topk_by_position(both_val, k, torch.arange(both_val.shape[-1]))
            v, i = order_val, torch.gather(both_idx, -1, order)
        best_val, best_idx = v, i
    v, i = _finish(best_val, best_idx, k)
    val[:, :length], idx[:, :length] = v, i
    return idx, val


def binned_image(layer: FullLayer, bin_of: torch.Tensor, bins: int, inv_count: torch.Tensor | None) -> torch.Tensor:
    """``(heads, bins, bins)`` sums of ``A`` over blocks of positions (``bin_of``: ``(n,)`` bin of each position);
    with ``inv_count`` ``(≥ n,)``, each cell ``(i, j)`` is weighted by ``inv_count[max(i, j)]``."""
    length = layer.length
    out = torch.zeros(layer.heads, bins, bins, dtype=layer.dtype)
    key_bins = bin_of[:length]
    for start, stop, probs in layer.blocks():
        probs = probs[..., :length]
        if inv_count is not None:
            rows = torch.arange(start, stop)[:, None]
            probs = probs * inv_count[torch.maximum(rows, torch.arange(length)[None, :])]
        by_key = probs.new_zeros(layer.heads, stop - start, bins).index_add_(2, key_bins, probs)
        out.index_add_(1, bin_of[start:stop], by_key)
    return out
