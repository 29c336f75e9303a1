"""Band-native operations on attention in band form: never the n × n matrix.

A :class:`Band` holds, per layer, the *local* attention of every query over ``x + w + 1`` slots —
``x`` slots for the global tokens (in ascending position order), then ``w + 1`` window slots where
slot ``k`` is key ``i + k − w/2`` — and the *global* attention of the ``x`` global tokens over every
key (``(heads, n_pad, x)``, the key axis possibly padded). An architecture behind the model seam
(:mod:`attnlens.models`) reads its attention into this form. The dense matrix
``A[i, j]`` (row = attending query, column = attended key) that the original study built by a
Python loop (recipes §5.1) is never formed here: every statistic is computed on the band, with
tensor operations whose memory is ``O(heads · n · w)``:

* :func:`received_attention` — ``Σ_i A[i, j]`` per head (recipes §8 step 1);
* :func:`topk_attended` — for every query the ``k`` keys it attends most (§7 Algorithm 1);
* :func:`topk_attending` — for every key the ``k`` queries attending to it most (§7 Algorithm 3);
* :func:`binned_image` — ``A`` summed into ``bins × bins`` blocks, for heat-maps (§6), optionally
  weighted cell by cell (the dataset aggregate of §6.2).

Each also takes a layer of full attention kept as its queries and keys, or a weighted combination of layers
of different layouts (:mod:`attnlens.attention.full`), which it reduces by query blocks instead.

The semantics follow recipes §5.2 exactly and do not trust the model's zeros: pad queries and
pad keys, local rows of global queries, window slots that point outside the sequence, at padding or
at a global token (which is reached through its own global slot) are all excluded by index, never by
``nonzero``. Ties in top-k are broken deterministically by ``(−score, position)``; partners with
score 0 are not reported (index −1), which is what the original's ``score ≠ 0`` filter did. Both
top-k directions run as one compiled pass over the band (:mod:`attnlens.attention.kernels`).

The dense reconstruction these operations are checked against lives in ``tests/unit/attention/test_attention.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlens.attention import full, topk
from attnlens.attention.kernels import share_torch_threads, topk_attended_kernel, topk_attending_kernel
from attnlens.attention.layers import layer_slice

#: Working memory one head-chunk may use, in bytes (heads are processed in chunks of this size).
CHUNK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Band:
    """One example's attention at one layer in band form: sliding-window slots plus global slots and rows.

    :meth:`attnlens.models.seam.Architecture.run` produces it.

    Attributes:
        local: ``(heads, n, x + w + 1)`` local attention (``n`` = tensor length, padding included).
        global_: ``(heads, n_pad ≥ n, x)`` attention of the global tokens over all keys, or ``None``
            when the batch had no global token (``x = 0``).
        length: number of real tokens; they are the first ``length`` positions (right padding).
        global_positions: ``(n_b,)`` ascending positions of this example's global tokens
            (``n_b ≤ x``; slots ``n_b..x−1`` are unused for this example).
    """

    local: torch.Tensor
    global_: torch.Tensor | None
    length: int
    global_positions: torch.Tensor

    def __post_init__(self) -> None:
        if self.local.dim() != 3:
            raise ValueError(f"local attention must be (heads, n, slots), got {tuple(self.local.shape)}")
        if not 0 <= self.length <= self.n:
            raise ValueError(f"length {self.length} outside [0, {self.n}]")
        if self.window < 0 or self.window % 2:
            raise ValueError(f"{self.slots} slots with {self.x} global slots is not an even window")
        if len(self.global_positions) > self.x:
            raise ValueError(f"{len(self.global_positions)} global positions but only {self.x} global slots")
        if len(self.global_positions) and int(self.global_positions.max()) >= self.length:
            raise ValueError("a global position lies in the padding")
        if self.global_ is not None and (self.global_.shape[0] != self.heads or self.global_.shape[1] < self.n):
            raise ValueError(f"global attention {tuple(self.global_.shape)} does not match local {self.local.shape}")

    def detach(self) -> Band:
        """The same band, out of any autograd graph."""
        glob = None if self.global_ is None else self.global_.detach()
        return Band(self.local.detach(), glob, self.length, self.global_positions.detach())

    def cpu(self) -> Band:
        """The same band on the CPU (the compiled summaries run there)."""
        glob = None if self.global_ is None else self.global_.cpu()
        return Band(self.local.cpu(), glob, self.length, self.global_positions.cpu())

    @property
    def heads(self) -> int:
        return self.local.shape[0]

    @property
    def n(self) -> int:
        return self.local.shape[1]

    @property
    def slots(self) -> int:
        return self.local.shape[2]

    @property
    def x(self) -> int:
        return 0 if self.global_ is None else self.global_.shape[2]

    @property
    def window(self) -> int:
        return self.slots - self.x - 1

    @property
    def half(self) -> int:
        return self.window // 2

    @property
    def n_global(self) -> int:
        return len(self.global_positions)

    @property
    def _layout(self) -> tuple[torch.Tensor, ...]:
        gpos = tuple(self.global_positions.tolist())
        return _layout(self.n, self.length, self.window, self.x, gpos, str(self.device))

    @property
    def is_global(self) -> torch.Tensor:
        """``(n,)`` bool: the position is a global token."""
        return self._layout[0]

    @property
    def query_ok(self) -> torch.Tensor:
        """``(n,)`` bool: the position's *local* row is used (real and not global)."""
        return self._layout[1]

    @property
    def slot_keys(self) -> torch.Tensor:
        """``(n, x + w + 1)`` key position of every local slot, ``−1`` where the slot does not count."""
        return self._layout[2]

    def head_chunks(self, bytes_per_head: int) -> Iterator[slice]:
        """Slices of heads whose working set stays under :data:`CHUNK_BYTES`."""
        step = max(1, CHUNK_BYTES // max(1, bytes_per_head))
        for start in range(0, self.heads, step):
            yield slice(start, min(start + step, self.heads))

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    @property
    def device(self) -> torch.device:
        return self.local.device

    def probabilities(self, start: int, stop: int) -> torch.Tensor:
        """``(heads, stop − start, n)`` dense rows ``A[start:stop, :]``: the local slots (window and global) of
        local rows, the global rows of global tokens; unused rows are 0. For combining layers of different
        layouts by query blocks (:class:`attnlens.attention.full.Combination`)."""
        keys = self.slot_keys[start:stop].long()  # (B, slots), −1 = does not count
        out = self.local.new_zeros(self.heads, stop - start, self.n + 1)
        out.scatter_add_(2, torch.where(keys >= 0, keys, self.n).expand(self.heads, -1, -1), self.local[:, start:stop])
        out = out[..., : self.n]
        for j, g in enumerate(self.global_positions.tolist()):
            if start <= g < stop:
                out[:, g - start, : self.length] = self.global_[:, : self.length, j]
        return out

    def blocks(self) -> Iterator[tuple[int, int, torch.Tensor]]:
        """``(start, stop, probabilities)`` for consecutive blocks of the real queries (as a full layer's)."""
        step = max(1, CHUNK_BYTES // max(1, 2 * self.heads * self.n * self.local.element_size()))
        for start in range(0, self.length, step):
            stop = min(start + step, self.length)
            yield start, stop, self.probabilities(start, stop)

    def key_major(self, heads: slice) -> torch.Tensor:
        """``(h, n, w + 1)`` window attention re-indexed by key: ``[h, c, k'] = A[c − w/2 + k', c]``.

        Rows of unused queries are zeroed first. The skew is a strided view of one padded copy
        (strides ``(w + 1, w)``), so no index tensor of the band's size is built.
        """
        w, half, n, x = self.window, self.half, self.n, self.x
        padded = self.local.new_zeros(heads.stop - heads.start, n + w, w + 1)
        padded[:, half : half + n].copy_(self.local[heads, :, x:])
        bad = torch.nonzero(~self.query_ok).flatten()
        if len(bad):
            padded.index_fill_(1, bad + half, 0.0)
        return padded.as_strided((padded.shape[0], n, w + 1), (padded.stride(0), w + 1, w), storage_offset=w)


@functools.lru_cache(maxsize=4)
def _layout(
    n: int, length: int, window: int, x: int, gpos: tuple[int, ...], device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    """Index tensors of a band layout, shared by every layer and head with the same layout.

    Returns ``(is_global, query_ok, slot_keys)`` on ``device`` (the band's); ``slot_keys`` is int32 (−1 = unused).
    """
    half = window // 2
    is_global = torch.zeros(n, dtype=torch.bool)
    is_global[list(gpos)] = True
    query_ok = (torch.arange(n) < length) & ~is_global
    c = torch.arange(n)[:, None] + torch.arange(window + 1)[None, :] - half
    ok = (c >= 0) & (c < length) & query_ok[:, None] & ~is_global[c.clamp(0, n - 1)]
    keys = torch.full((n, x + window + 1), -1, dtype=torch.int32)
    keys[:, x:] = torch.where(ok, c, -1)
    for j, g in enumerate(gpos):
        keys[:, j] = torch.where(query_ok, g, -1)
    return is_global.to(device), query_ok.to(device), keys.to(device)


def received_attention(band: Band) -> torch.Tensor:
    """``(heads, n)`` attention each key receives, ``Σ_i A[i, j]`` (pad keys 0).

    Summed over every attending query: window slots, the local rows' global slots and the global
    tokens' own rows. Over the real keys the total is the number of real queries.
    """
    if not isinstance(band, Band):
        return full.received(band)
    n, _x, nb, length = band.n, band.x, band.n_global, band.length
    out = band.local.new_zeros(band.heads, n)
    per_head = (n + band.window) * (band.window + 1) * band.local.element_size()
    for hs in band.head_chunks(per_head):
        out[hs] = band.key_major(hs).sum(-1)
    if nb:
        rows = band.query_ok.to(band.local.dtype)
        out[:, band.global_positions] = torch.einsum("hnj,n->hj", band.local[:, :, :nb], rows)
        out[:, :length] += band.global_[:, :length, :nb].sum(-1)
    out[:, length:] = 0
    return out


def attention_from(band: Band, rows: torch.Tensor) -> torch.Tensor:
    """``(heads, n)`` ``Σ_{i ∈ rows} A[i, j]``: the attention a set of queries pays each key — a question's tokens,
    an answer's (``rows``: ``(n,)`` nonzero on the queries; pad queries never count). Its total over the keys is
    the number of real queries in ``rows``. A global row is read whole; a local row through its window and global
    slots, so no dense row is formed."""
    rows = torch.nn.functional.pad(rows.to(band.device).bool()[: band.n], (0, max(0, band.n - len(rows))))
    if not isinstance(band, Band):
        weight = (rows & (torch.arange(band.n, device=band.device) < band.length)).to(band.dtype)[None]
        return full.weighted_received(band, weight)
    local = torch.nonzero(rows & band.query_ok).flatten()
    keys = band.slot_keys[local].long()  # (r, slots), −1 = does not count
    out = band.local.new_zeros(band.heads, band.n + 1)
    index = torch.where(keys >= 0, keys, band.n).reshape(1, -1).expand(band.heads, -1)
    out.scatter_add_(1, index, band.local[:, local].reshape(band.heads, -1))
    for j, g in enumerate(band.global_positions.tolist()):
        if rows[g]:
            out[:, : band.length] += band.global_[:, : band.length, j]
    return out[:, : band.n]


def _as_numpy(t: torch.Tensor):
    """A NumPy view (no copy on CPU; strided views stay strided — the kernels take any layout)."""
    return t.detach().cpu().numpy()


def _run_topk(kernel, band: Band, k: int, *layout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Call a compiled kernel of :mod:`attnlens.attention.kernels` on ``band``; ``(heads, n, k)`` outputs."""
    idx = torch.full((band.heads, band.n, k), -1, dtype=torch.int32)
    val = torch.zeros(band.heads, band.n, k, dtype=band.local.dtype)
    if k == 0 or band.length == 0:
        return idx, val
    local = _as_numpy(band.local)
    glob = local[:, :1, :0] if band.global_ is None else _as_numpy(band.global_)
    share_torch_threads()
    arrays = [_as_numpy(t) for t in layout]
    kernel(local, glob, *arrays, _as_numpy(band.global_positions.long()), band.length, idx.numpy(), val.numpy())
    return idx, val


def topk_attended(band: Band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query, the ``k`` keys it attends to most, ordered by ``(−score, key)``.

    A local row's candidates are its used slots; a global token's row is every real key.

    Returns:
        ``(keys, scores)``, each ``(heads, n, k)``; pad queries and unused places hold −1 / 0.
    """
    if not isinstance(band, Band):
        return full.topk_attended(band, k)
    if topk.on_device(band):
        return topk.band_topk_attended(band, k)
    return _run_topk(topk_attended_kernel, band, k, band.query_ok, band.is_global)


def topk_attending(band: Band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every key, the ``k`` queries attending to it most, ordered by ``(−score, query)``.

    A real, non-global key is attended by the local rows of its window and by every global token;
    a global key by every real query.

    Returns:
        ``(queries, scores)``, each ``(heads, n, k)``; pad keys and unused places hold −1 / 0.
    """
    if not isinstance(band, Band):
        return full.topk_attending(band, k)
    if topk.on_device(band):
        return topk.band_topk_attending(band, k)
    return _run_topk(topk_attending_kernel, band, k, band.query_ok, band.is_global)


def bin_edges(n_ref: int, bins: int) -> torch.Tensor:
    """``(n_ref,)`` bin of every position when ``n_ref`` positions are cut into ``bins`` equal blocks."""
    return torch.arange(n_ref) * bins // n_ref


def binned_image(band: Band, bins: int, n_ref: int | None = None, count: torch.Tensor | None = None) -> torch.Tensor:
    """``(heads, bins, bins)`` sums of ``A`` over blocks of positions (row = query bin, column = key bin).

    Args:
        band: the example's attention at one layer.
        bins: blocks per axis.
        n_ref: positions the blocks cover (default: the example's real length; use the longest
            example's length to accumulate a dataset on common axes).
        count: optional ``(≥ n_ref,)`` number of examples with a real token at each position; each
            cell ``(i, j)`` is then divided by ``count[max(i, j)]`` (the examples in which both
            positions are real, for right-padded data), so that summing over a dataset gives the
            mean attention per cell (recipes §6.2, fixed).
    """
    n_ref = n_ref or band.length
    if band.length > n_ref:
        raise ValueError(f"example of {band.length} tokens does not fit {n_ref} positions")
    length = band.length
    bin_of = torch.zeros(band.n, dtype=torch.long)
    bin_of[:length] = bin_edges(n_ref, bins)[:length]
    if not isinstance(band, Band):
        inv = None if count is None else 1.0 / count.to(band.dtype).clamp(min=1)
        return full.binned_image(band, bin_of, bins, inv)
    keys = band.slot_keys
    bin_of = bin_of.to(keys.device)
    ok = keys >= 0
    safe = keys.clamp(min=0)
    flat = torch.where(ok, bin_of[:, None] * bins + bin_of[safe], bins * bins).reshape(-1)
    weight = None
    if count is not None:
        inv = 1.0 / count.to(keys.device, band.local.dtype).clamp(min=1)
        rows = torch.arange(band.n, device=keys.device)[:, None]
        weight = torch.where(ok, inv[torch.maximum(rows, safe)], 0.0).reshape(-1)
    out = band.local.new_zeros(band.heads, bins * bins + 1)
    per_head = band.n * band.slots * band.local.element_size() * 2
    for hs in band.head_chunks(per_head):
        values = band.local[hs].reshape(hs.stop - hs.start, -1)
        if weight is not None:
            values = values * weight
        out[hs].index_add_(1, flat, values)
    rows_out = out[:, : bins * bins].view(band.heads, bins, bins)
    positions = torch.arange(length, device=keys.device)
    for j, g in enumerate(band.global_positions.tolist()):
        values = band.global_[:, :length, j]
        if count is not None:
            values = values * inv[torch.clamp(positions, min=g)]
        rows_out[:, int(bin_of[g])].index_add_(1, bin_of[:length], values)
    return rows_out.contiguous()


def bin_cells(lengths: Sequence[int] | torch.Tensor, bins: int, n_ref: int) -> torch.Tensor:
    """``(bins, bins)`` number of real cells per block, summed over examples of the given lengths."""
    edges = bin_edges(n_ref, bins)
    out = torch.zeros(bins, bins, dtype=torch.float64)
    for length in torch.as_tensor(lengths).tolist():
        per_bin = torch.bincount(edges[:length], minlength=bins).double()
        out += per_bin[:, None] * per_bin[None, :]
    return out


def layer_configuration(received: torch.Tensor, layers: str, importance: torch.Tensor | None = None) -> torch.Tensor:
    """One attention vector per token from ``(layers, heads, n)`` received attention (recipes §8, §11).

    Args:
        received: ``(L, H, n)``.
        layers: ``last`` (the paper's "layer 12"), ``all``, ``lower`` (first half), ``upper`` (second half).
        importance: optional ``(L, H)`` head weights multiplied in first ("scaled" configurations).

    Returns:
        ``(n,)`` sum over the chosen layers and all heads.
    """
    values = received if importance is None else received * importance.to(received.dtype)[:, :, None]
    return values[layer_slice(received.shape[0], layers)].sum((0, 1))


def attention_scores(received: torch.Tensor, config: str) -> np.ndarray:
    """``(n,)`` received attention summed over the heads of a layer configuration (unscaled)."""
    return layer_configuration(received, config).numpy().astype(np.float64)
