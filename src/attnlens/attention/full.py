"""Full attention kept as its queries and keys, reduced by query blocks: never the ``heads × n × n`` tensor.

A layer of full attention (ModernBERT's global layers; a decoder's causal layers, with or without a sliding window,
their keys shared by groups of query heads) is stored as :class:`FullLayer`: the layer's scaled (and rotated)
queries and its keys, ``O(heads · n · d)``. Every summary the band gives
(:mod:`attnlens.attention.band`) — received attention, top-k partners both ways, binned maps, and the weighted
ones of :mod:`attnlens.attention.weighted` — is computed here by blocks of queries: a block's
``(heads, block, n)`` probabilities are formed, reduced and dropped, the block sized so that they stay under
:data:`~attnlens.attention.band.CHUNK_BYTES`. The results follow the band's semantics exactly: pad queries and
pad keys are excluded, top-k ties go to the smaller position, partners of score 0 are not reported (−1).

The functions of :mod:`attnlens.attention.band` and :mod:`attnlens.attention.weighted` accept a
:class:`FullLayer` (or a :class:`Combination` of layers of different forms) wherever they accept a band, and
come here. The functions below take anything with ``heads``, ``n``, ``length``, ``dtype`` and ``blocks()``.

A generated answer needs only its own rows: :class:`QueryRows` keeps a few queries of a causal layer beside all its
keys, so that what an answer attends to is read at tens of thousands of tokens in ``rows × n`` memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from attnlens.attention import topk
from attnlens.attention.kernels import full_block_kernel, share_torch_threads

#: Working memory of one block of probabilities, in bytes.
BLOCK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class FullLayer:
    """One example's full attention at one layer, as its queries and keys.

    Attributes:
        query: ``(heads, n, d)`` queries as the layer scores them (scaled, rotated where the model rotates them);
            ``n`` = tensor length, padding included.
        key: ``(key_heads, n, d)`` keys. Grouped-query attention shares one key head among ``heads / key_heads``
            consecutive query heads (query head ``h`` reads key head ``h // (heads / key_heads)``, Hugging Face's
            ``repeat_kv``); the keys are never repeated in memory.
        length: real tokens, the first ``length`` positions.
        causal: a decoder's attention: query ``i`` attends to the keys ``j ≤ i`` only.
        window: with ``causal``, a sliding window of ``window`` keys, ``i − window < j ≤ i`` (Mistral's, Gemma 3's
            local layers); ``None``: every earlier key. A block of queries scores only the keys it can reach.
    """

    query: torch.Tensor
    key: torch.Tensor
    length: int
    causal: bool = False
    window: int | None = None

    def __post_init__(self) -> None:
        if self.query.dim() != 3 or self.key.dim() != 3 or self.query.shape[1:] != self.key.shape[1:]:
            raise ValueError(f"queries {tuple(self.query.shape)} and keys {tuple(self.key.shape)} must be (H, n, d)")
        if self.key.shape[0] == 0 or self.query.shape[0] % self.key.shape[0]:
            raise ValueError(f"{self.key.shape[0]} key heads do not divide {self.query.shape[0]} query heads")
        if not 0 <= self.length <= self.n:
            raise ValueError(f"length {self.length} outside [0, {self.n}]")
        if self.window is not None and (not self.causal or self.window < 1):
            raise ValueError(f"a window ({self.window}) is a causal layer's, of at least one key")

    @property
    def heads(self) -> int:
        return self.query.shape[0]

    @property
    def key_heads(self) -> int:
        return self.key.shape[0]

    @property
    def n(self) -> int:
        return self.query.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.query.dtype

    @property
    def device(self) -> torch.device:
        return self.query.device

    #: A full layer has no global tokens of a band (every token attends to every other).
    n_global = 0

    def _with(self, query: torch.Tensor, key: torch.Tensor) -> FullLayer:
        return FullLayer(query, key, self.length, self.causal, self.window)

    def detach(self) -> FullLayer:
        return self._with(self.query.detach(), self.key.detach())

    def cpu(self) -> FullLayer:
        return self._with(self.query.cpu(), self.key.cpu())

    def block_rows(self) -> int:
        """Queries per block: a block's ``(heads, rows, width)`` probabilities (and a copy) fit :data:`BLOCK_BYTES`,
        ``width`` the most keys a block reaches: every key, or a window plus the block's own rows."""
        cap = BLOCK_BYTES // (2 * self.heads * self.query.element_size())  # elements of one head's block
        if self.window is None or self.window >= self.n:
            rows = cap // max(self.n, 1)
        else:  # the largest rows with rows · (window + rows) ≤ cap
            rows = (math.isqrt(self.window**2 + 4 * cap) - self.window) // 2
        return max(1, min(self.length or 1, rows))

    def key_range(self, start: int, stop: int) -> tuple[int, int]:
        """The keys ``[lo, hi)`` queries ``start … stop − 1`` can reach: the real ones, the earlier ones of a causal
        layer, those in its window."""
        if not self.causal:
            return 0, self.length
        lo = 0 if self.window is None else max(0, start - self.window + 1)
        return lo, min(stop, self.length)

    def scores(self, start: int, stop: int, out: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
        """``(heads, stop − start, hi − lo)`` scores of queries ``start … stop − 1`` over the keys they can reach
        (:meth:`key_range`; the causal and window limits inside it at −∞), and ``lo``. ``out``: a flat buffer of
        at least as many elements to write them into (outside autograd)."""
        lo, hi = self.key_range(start, stop)
        return block_scores(self.query[:, start:stop], self.key, start, lo, hi, self.causal, self.window, out), lo

    def probabilities(self, start: int, stop: int) -> torch.Tensor:
        """``(heads, stop − start, n)`` attention of queries ``start … stop − 1`` (real ones) over every key; pad
        keys, and the keys a causal layer's query cannot reach, get 0."""
        scores, lo = self.scores(start, stop)
        probs = torch.softmax(scores, -1)
        if probs.shape[-1] < self.n:
            probs = torch.nn.functional.pad(probs, (lo, self.n - lo - probs.shape[-1]))
        return probs

    def reachable_blocks(self) -> Iterator[tuple[int, int, int, torch.Tensor]]:
        """``(start, stop, lo, probabilities)`` for consecutive blocks of the real queries: ``(heads, stop − start,
        width)`` over the keys ``lo … lo + width − 1`` the block can reach (:meth:`key_range`), unpadded — a causal
        block no wider than its last query, a windowed one no wider than its window plus its rows.

        Outside autograd every block is formed in one buffer, scores then softmax in place: each block's tensor is
        overwritten by the next one, so a caller reduces it before it asks for the next.
        """
        step = self.block_rows()
        grad = self.query.requires_grad or self.key.requires_grad
        buffer = None
        for start in range(0, self.length, step):
            stop = min(start + step, self.length)
            if grad:
                scores, lo = self.scores(start, stop)
                yield start, stop, lo, torch.softmax(scores, -1)
                continue
            if buffer is None:
                width = self.n if self.window is None else min(self.n, self.window + step)  # the widest block
                buffer = self.query.new_empty(self.heads * step * width)
            scores, lo = self.scores(start, stop, buffer)
            yield start, stop, lo, torch.softmax(scores, -1, out=scores)

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(start, stop, probabilities)`` for consecutive blocks of the real queries, over every key
        (:meth:`reachable_blocks` padded with the 0 of the keys a block cannot reach)."""
        for start, stop, lo, probs in self.reachable_blocks():
            if probs.shape[-1] < self.n:
                probs = torch.nn.functional.pad(probs, (lo, self.n - lo - probs.shape[-1]))
            yield start, stop, probs

    def dense(self) -> torch.Tensor:
        """``(heads, n, n)`` — for tests and short inputs only."""
        out = self.query.new_zeros(self.heads, self.n, self.n)
        for start, stop, probs in self.blocks():
            out[:, start:stop] = probs
        return out


def _mask_unreachable(scores: torch.Tensor, start: int, lo: int, window: int | None) -> None:
    """Set to −∞, in place, the scores of a causal block (queries ``start …``, keys ``lo …``) a query cannot reach:
    the later keys (inside the block's own square of keys ``start …``) and, with a window, the keys ``≤ i − window``
    (inside the first columns): only those few columns are compared, never the block's full width."""
    rows, width = scores.shape[1], scores.shape[2]
    device = scores.device
    i = torch.arange(start, start + rows, device=device)[:, None]
    first = start - lo  # the later keys: columns from key ``start`` on
    if first < width:
        j = torch.arange(start, lo + width, device=device)[None, :]
        scores[..., first:].masked_fill_(j > i, float("-inf"))
    if window is not None:
        end = min(width, start + rows - window - lo)  # keys ≤ (last query) − window
        if end > 0:
            j = torch.arange(lo, lo + end, device=device)[None, :]
            scores[..., :end].masked_fill_(j <= i - window, float("-inf"))


def block_scores(
    query: torch.Tensor,
    key: torch.Tensor,
    start: int,
    lo: int,
    hi: int,
    causal: bool,
    window: int | None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(heads, rows, hi − lo)`` scores of the queries ``(heads, rows, d)`` of positions ``start …`` over the keys
    ``lo … hi − 1`` of ``key`` ``(key_heads, n, d)`` (query head ``h`` reads key head ``h // (heads / key_heads)``:
    one product per key head, the keys never repeated), a causal layer's unreachable keys at −∞. ``out``: a flat
    buffer of at least as many elements to write them into (outside autograd)."""
    heads, rows = query.shape[0], query.shape[1]
    key_heads = key.shape[0]
    group = heads // key_heads
    if group > 1:  # query heads h = k·group + g read key head k
        query = query.reshape(key_heads, group * rows, -1)
    keys = key[:, lo:hi].transpose(1, 2)
    if out is None:
        scores = query @ keys
    else:
        scores = torch.bmm(
            query,
            keys,
            out=out[: query.shape[0] * query.shape[1] * (hi - lo)].view(query.shape[0], query.shape[1], hi - lo),
        )
    scores = scores.view(heads, rows, hi - lo)
    if causal:
        _mask_unreachable(scores, start, lo, window)
    return scores


@dataclass(frozen=True)
class QueryRows:
    """A few consecutive queries of one causal layer over all its keys: what a generated answer's rows read, at any
    length, in memory that grows as ``rows × n``, never ``n × n``.

    Attributes:
        query: ``(heads, rows, d)`` the scaled, rotated queries of positions ``first … first + rows − 1``.
        key: ``(key_heads, n, d)`` every key (shared by groups of query heads as :class:`FullLayer`'s are).
        first: the position of the first query.
        window: a sliding window of ``window`` keys (``i − window < j ≤ i``); ``None``: every earlier key.
    """

    query: torch.Tensor
    key: torch.Tensor
    first: int
    window: int | None = None

    def __post_init__(self) -> None:
        if self.query.dim() != 3 or self.key.dim() != 3 or self.query.shape[2] != self.key.shape[2]:
            raise ValueError(f"queries {tuple(self.query.shape)} and keys {tuple(self.key.shape)} must be (H, ·, d)")
        if self.key.shape[0] == 0 or self.query.shape[0] % self.key.shape[0]:
            raise ValueError(f"{self.key.shape[0]} key heads do not divide {self.query.shape[0]} query heads")
        if self.first < 0 or self.first + self.rows > self.n:
            raise ValueError(f"query rows {self.first} to {self.first + self.rows} outside the {self.n} keys")

    @property
    def heads(self) -> int:
        return self.query.shape[0]

    @property
    def rows(self) -> int:
        return self.query.shape[1]

    @property
    def n(self) -> int:
        return self.key.shape[1]

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(start, stop, probabilities)``: the rows in blocks of :data:`BLOCK_BYTES`, each ``(heads, stop − start,
        n)`` over every key (0 where a query cannot reach), ``start`` and ``stop`` positions."""
        step = max(1, BLOCK_BYTES // (2 * self.heads * self.query.element_size() * max(self.n, 1)))
        for a in range(0, self.rows, step):
            start, stop = self.first + a, min(self.first + a + step, self.first + self.rows)
            lo = 0 if self.window is None else max(0, start - self.window + 1)
            hi = min(stop, self.n)
            scores = block_scores(self.query[:, a : a + stop - start], self.key, start, lo, hi, True, self.window)
            probs = torch.softmax(scores, -1)
            yield start, stop, torch.nn.functional.pad(probs, (lo, self.n - hi))


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

    @property
    def device(self) -> torch.device:
        return self.layers[0].device

    def probabilities(self, start: int, stop: int) -> torch.Tensor:
        out = torch.zeros(1, stop - start, self.n, device=self.device)
        for layer, w in zip(self.layers, self.weights, strict=True):
            if bool(w.any()):
                out[0] += torch.einsum("h,hbn->bn", w.float(), layer.probabilities(start, stop).float())
        return out

    def reachable_blocks(self) -> Iterator[tuple[int, int, int, torch.Tensor]]:
        """:meth:`blocks` with every key (``lo`` = 0): the layers' reaches differ."""
        for start, stop, probs in self.blocks():
            yield start, stop, 0, probs

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        heads = max(layer.heads for layer in self.layers)
        step = max(1, min(self.length or 1, BLOCK_BYTES // (4 * (heads + 1) * max(self.n, 1))))
        for start in range(0, self.length, step):
            stop = min(start + step, self.length)
            yield start, stop, self.probabilities(start, stop)


def received(layer: FullLayer) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i A[i, j]`` (pad keys 0)."""
    return summaries(layer, None)["received"]


def weighted_received(
    layer: FullLayer, query_weight: torch.Tensor | None = None, key_weight: torch.Tensor | None = None
) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i w_i A[i, j] u_j``, per-query ``w`` and per-key ``u`` each ``(heads | 1, n)``."""
    dtype = layer.dtype if query_weight is None else torch.promote_types(layer.dtype, query_weight.dtype)
    out = torch.zeros(layer.heads, layer.n, dtype=dtype, device=layer.device)
    for start, stop, probs in layer.blocks():
        if query_weight is not None:
            probs = probs * query_weight[:, start:stop, None]
        out += probs.sum(1)
    return out if key_weight is None else out * key_weight


def products_received(layer: FullLayer, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``(heads, n)`` ``Σ_i A[i, j] ⟨left_i, right_j⟩`` (gradient-weighted attention: ``∂F/∂o`` and ``v``)."""
    out = torch.zeros(layer.heads, layer.n, dtype=layer.dtype, device=layer.device)
    for start, stop, probs in layer.blocks():
        out += (probs * (left[:, start:stop] @ right[:, : layer.n].transpose(1, 2))).sum(1)
    out[:, layer.length :] = 0
    return out


def summaries(layer, k: int | None) -> dict[str, torch.Tensor]:
    """Received attention and, with ``k``, both top-k tables, from one compiled pass over each block of query rows
    (:func:`attnlens.attention.kernels.full_block_kernel`): ``received`` ``(heads, n)``; ``attended_idx/val`` — for
    every query the ``k`` keys it attends to most — and ``attending_idx/val`` — for every key the ``k`` queries
    attending to it most — each ``(heads, n, k)``, ordered by ``(−score, position)``, −1 / 0 where fewer than ``k``
    partners have a score above 0. Received attention is summed in float64; half-precision layers are reduced in
    float32 (the kernel's types) and their outputs given back in their dtype. A layer on a card is summarised there
    (:func:`attnlens.attention.topk.full_summaries`: the same numbers)."""
    if topk.on_device(layer):
        return topk.full_summaries(layer, k)
    heads, n, length = layer.heads, layer.n, layer.length
    work = torch.float64 if layer.dtype == torch.float64 else torch.float32
    value_dtype = np.float64 if work == torch.float64 else np.float32
    received64 = np.zeros((heads, n), dtype=np.float64)

    def topk_state() -> tuple[np.ndarray, ...]:
        return (
            np.full((heads, n, k), -1, dtype=np.int32),
            np.zeros((heads, n, k), dtype=value_dtype),
            np.zeros((heads, n), dtype=np.int64),
            np.zeros((heads, n), dtype=value_dtype),
            np.full((heads, n), -1, dtype=np.int32),
        )

    rows, cols = (topk_state(), topk_state()) if k is not None else (None, None)
    with torch.no_grad():
        for start, _, lo, probs in layer.reachable_blocks():
            probs = probs.to(work).contiguous().cpu().numpy()
            share_torch_threads()
            full_block_kernel(probs, start, length, received64, *((rows, cols) if k else (None, None)), first_key=lo)
    out = {"received": torch.from_numpy(received64).to(layer.device, layer.dtype)}
    for name, state in (("attended", rows), ("attending", cols)) if k is not None else ():
        out[f"{name}_idx"], out[f"{name}_val"] = torch.from_numpy(state[0]), torch.from_numpy(state[1]).to(layer.dtype)
    return out


def topk_attended(layer: FullLayer, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query the ``k`` keys it attends to most: ``(keys, scores)``, each ``(heads, n, k)``."""
    out = summaries(layer, k)
    return out["attended_idx"], out["attended_val"]


def topk_attending(layer: FullLayer, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every key the ``k`` queries attending to it most: ``(queries, scores)``, each ``(heads, n, k)``."""
    out = summaries(layer, k)
    return out["attending_idx"], out["attending_val"]


def binned_image(layer: FullLayer, bin_of: torch.Tensor, bins: int, inv_count: torch.Tensor | None) -> torch.Tensor:
    """``(heads, bins, bins)`` sums of ``A`` over blocks of positions (``bin_of``: ``(n,)`` bin of each position);
    with ``inv_count`` ``(≥ n,)``, each cell ``(i, j)`` is weighted by ``inv_count[max(i, j)]``."""
    length = layer.length
    out = torch.zeros(layer.heads, bins, bins, dtype=layer.dtype, device=layer.device)
    bin_of = bin_of.to(layer.device)
    key_bins = bin_of[:length]
    for start, stop, probs in layer.blocks():
        probs = probs[..., :length]
        if inv_count is not None:
            rows = torch.arange(start, stop, device=layer.device)[:, None]
            keys = torch.arange(length, device=layer.device)[None, :]
            probs = probs * inv_count.to(layer.device)[torch.maximum(rows, keys)]
        by_key = probs.new_zeros(layer.heads, stop - start, bins).index_add_(2, key_bins, probs)
        out.index_add_(1, bin_of[start:stop], by_key)
    return out
