"""Band-native operations on Longformer attention: never the n × n matrix.

Longformer returns, per layer, the *local* attention of every query over ``x + w + 1`` slots —
``x`` slots for the global tokens (in ascending position order), then ``w + 1`` window slots where
slot ``k`` is key ``i + k − w/2`` — and the *global* attention of the ``x`` global tokens over every
key (``(batch, heads, n_pad, x)``, key axis padded to a multiple of the window). The dense matrix
``A[i, j]`` (row = attending query, column = attended key) that the original study built by a
Python loop (recipes §5.1) is never formed here: every statistic is computed on the band, with
tensor operations whose memory is ``O(heads · n · w)``:

* :func:`received_attention` — ``Σ_i A[i, j]`` per head (recipes §8 step 1);
* :func:`topk_attended` — for every query the ``k`` keys it attends most (§7 Algorithm 1);
* :func:`topk_attending` — for every key the ``k`` queries attending to it most (§7 Algorithm 3);
* :func:`binned_image` — ``A`` summed into ``bins × bins`` blocks, for heat-maps (§6), optionally
  weighted cell by cell (the dataset aggregate of §6.2).

The semantics follow recipes §5.2 exactly and do not trust the model's zeros: pad queries and
pad keys, local rows of global queries, window slots that point outside the sequence, at padding or
at a global token (which is reached through its own global slot) are all excluded by index, never by
``nonzero``. Ties in top-k are broken deterministically by ``(−score, position)``; partners with
score 0 are not reported (index −1), which is what the original's ``score ≠ 0`` filter did. Both
top-k directions run as one compiled pass over the band (:mod:`attnlens.kernels`).

The dense reconstruction these operations are checked against lives in ``tests/test_attention.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd
import torch

from attnlens.errors import InputError
from attnlens.io import load_tensors, unpack_strings
from attnlens.kernels import topk_attended_kernel, topk_attending_kernel

#: Working memory one head-chunk may use, in bytes (heads are processed in chunks of this size).
CHUNK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Band:
    """One example's attention at one layer, as Longformer returns it.

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
        return _layout(self.n, self.length, self.window, self.x, tuple(self.global_positions.tolist()))

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
def _layout(n: int, length: int, window: int, x: int, gpos: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Index tensors of a band layout, shared by every layer and head with the same layout.

    Returns ``(is_global, query_ok, slot_keys)``; ``slot_keys`` is int32 (−1 = unused).
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
    return is_global, query_ok, keys


def bands_from_outputs(
    attentions: Sequence[torch.Tensor],
    global_attentions: Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor,
    global_attention_mask: torch.Tensor | None,
) -> list[list[Band]]:
    """Split a Longformer forward's ``attentions`` / ``global_attentions`` into :class:`Band` objects.

    Returns:
        ``bands[b][layer]`` for every batch item ``b``.
    """
    lengths = attention_mask.long().sum(1)
    if not torch.equal(attention_mask.long(), (torch.arange(attention_mask.shape[1]) < lengths[:, None]).long()):
        raise ValueError("attention_mask must mark a prefix of real tokens (right padding)")
    out = []
    for b in range(attention_mask.shape[0]):
        gpos = (
            torch.nonzero(global_attention_mask[b] * attention_mask[b]).flatten()
            if global_attention_mask is not None
            else torch.zeros(0, dtype=torch.long)
        )
        layers = []
        for layer, local in enumerate(attentions):
            glob = None if global_attentions is None else global_attentions[layer][b]
            layers.append(Band(local[b], glob, int(lengths[b]), gpos))
        out.append(layers)
    return out


def received_attention(band: Band) -> torch.Tensor:
    """``(heads, n)`` attention each key receives, ``Σ_i A[i, j]`` (pad keys 0).

    Summed over every attending query: window slots, the local rows' global slots and the global
    tokens' own rows. Over the real keys the total is the number of real queries.
    """
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


def _as_numpy(t: torch.Tensor):
    """A NumPy view (no copy on CPU; strided views stay strided — the kernels take any layout)."""
    return t.detach().cpu().numpy()


def _run_topk(kernel, band: Band, k: int, *layout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Call a compiled kernel of :mod:`attnlens.kernels` on ``band``; ``(heads, n, k)`` outputs."""
    idx = torch.full((band.heads, band.n, k), -1, dtype=torch.int32)
    val = torch.zeros(band.heads, band.n, k, dtype=band.local.dtype)
    if k == 0 or band.length == 0:
        return idx, val
    local = _as_numpy(band.local)
    glob = local[:, :1, :0] if band.global_ is None else _as_numpy(band.global_)
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    arrays = [_as_numpy(t) for t in layout]
    kernel(local, glob, *arrays, _as_numpy(band.global_positions.long()), band.length, idx.numpy(), val.numpy())
    return idx, val


def topk_attended(band: Band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query, the ``k`` keys it attends to most, ordered by ``(−score, key)``.

    A local row's candidates are its used slots; a global token's row is every real key.

    Returns:
        ``(keys, scores)``, each ``(heads, n, k)``; pad queries and unused places hold −1 / 0.
    """
    return _run_topk(topk_attended_kernel, band, k, band.query_ok, band.is_global)


def topk_attending(band: Band, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every key, the ``k`` queries attending to it most, ordered by ``(−score, query)``.

    A real, non-global key is attended by the local rows of its window and by every global token;
    a global key by every real query.

    Returns:
        ``(queries, scores)``, each ``(heads, n, k)``; pad keys and unused places hold −1 / 0.
    """
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
    keys = band.slot_keys
    ok = keys >= 0
    safe = keys.clamp(min=0)
    flat = torch.where(ok, bin_of[:, None] * bins + bin_of[safe], bins * bins).reshape(-1)
    weight = None
    if count is not None:
        inv = 1.0 / count.to(band.local.dtype).clamp(min=1)
        weight = torch.where(ok, inv[torch.maximum(torch.arange(band.n)[:, None], safe)], 0.0).reshape(-1)
    out = band.local.new_zeros(band.heads, bins * bins + 1)
    per_head = band.n * band.slots * band.local.element_size() * 2
    for hs in band.head_chunks(per_head):
        values = band.local[hs].reshape(hs.stop - hs.start, -1)
        if weight is not None:
            values = values * weight
        out[hs].index_add_(1, flat, values)
    rows_out = out[:, : bins * bins].view(band.heads, bins, bins)
    positions = torch.arange(length)
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


#: Layer configurations of recipes §11: the paper's "layer 12", all layers, lower and upper half.
LAYER_CONFIGURATIONS = ("last", "all", "lower", "upper")


def layer_slice(n_layers: int, layers: str) -> slice:
    """The layers of a configuration: ``last``, ``all``, ``lower`` (first half) or ``upper`` (second half)."""
    half = n_layers // 2
    chosen = {
        "last": slice(n_layers - 1, n_layers),
        "all": slice(0, n_layers),
        "lower": slice(0, half),
        "upper": slice(half, n_layers),
    }
    if layers not in chosen:
        raise ValueError(f"unknown layer configuration {layers!r}; expected one of {LAYER_CONFIGURATIONS}")
    return chosen[layers]


# --- extraction: one forward pass per example, summaries per shard ------------------------------


def band_key(example_id: str) -> str:
    """The safetensors key prefix of an example's stored bands (``|`` is not allowed in keys)."""
    return str(example_id).replace("|", "_")


SUMMARY_SCHEMA = "attention_summaries/v1"
BANDS_SCHEMA = "attention_bands/v1"


@torch.no_grad()
def forward_bands(model, batch: dict[str, torch.Tensor]) -> list[Band]:
    """One example's forward pass with attention outputs, as one :class:`Band` per layer."""
    out = model(**batch, output_attentions=True)
    mask, gmask = batch["attention_mask"], batch.get("global_attention_mask")
    # the summaries (compiled kernels) run on the CPU: a model on a GPU hands its attention over once
    local = [a.cpu() for a in out.attentions]
    glob = [g.cpu() for g in out.global_attentions] if out.global_attentions is not None else None
    return bands_from_outputs(local, glob, mask.cpu(), None if gmask is None else gmask.cpu())[0]


def compute_example_summaries(bands: Sequence[Band], k: int | None) -> dict[str, torch.Tensor]:
    """``received`` ``(L, H, n)`` and, when ``k`` is given, top-k attended / attending ``(L, H, n, k)``.

    Outputs are allocated once and filled layer by layer (indices int32, scores float32).
    """
    n_layers, heads, n = len(bands), bands[0].heads, bands[0].n
    out = {"received": torch.zeros(n_layers, heads, n)}
    if k is not None:
        for name in ("attended", "attending"):
            out[f"{name}_idx"] = torch.empty(n_layers, heads, n, k, dtype=torch.int32)
            out[f"{name}_val"] = torch.empty(n_layers, heads, n, k)
    for layer, band in enumerate(bands):
        out["received"][layer] = received_attention(band)
        if k is not None:
            for name, fn in (("attended", topk_attended), ("attending", topk_attending)):
                idx, val = fn(band, k)
                out[f"{name}_idx"][layer] = idx
                out[f"{name}_val"][layer] = val
                del idx, val
    return out


def position_counts(lengths: Sequence[int]) -> torch.Tensor:
    """``(max length,)`` number of examples with a real token at each position."""
    lengths = torch.as_tensor(list(lengths), dtype=torch.long)
    n_max = int(lengths.max()) if len(lengths) else 0
    return (torch.arange(n_max)[None, :] < lengths[:, None]).sum(0)


@dataclass
class ExampleAttention:
    """What extraction stored for one example."""

    example_id: str
    input_ids: torch.Tensor  # (n,)
    received: torch.Tensor  # (L, H, n)
    topk: dict[str, torch.Tensor] | None  # attended_idx/val, attending_idx/val: (L, H, n, k)


@dataclass
class AttentionSummaries:
    """Every shard of ``extract_attention``, merged."""

    examples: dict[str, ExampleAttention]
    aggregate: torch.Tensor  # (L, H, bins, bins): sum over examples of A / count[max(i, j)]
    position_count: torch.Tensor  # (n_max,)


def load_summaries(paths: Sequence) -> AttentionSummaries:
    """Merge the shard files of ``extract_attention``."""
    examples: dict[str, ExampleAttention] = {}
    aggregate = None
    count = None
    for path in paths:
        t, prov = load_tensors(path, SUMMARY_SCHEMA)
        off, toff = t["offsets"].tolist(), t["topk_offsets"].tolist()
        if "example_id_bytes" in t and unpack_strings(t["example_id_bytes"], t["example_id_offsets"]) != list(
            prov["example_ids"]
        ):
            raise InputError(str(path), "example_id_bytes", "expected the same example ids as its metadata")
        topk_pos = {eid: j for j, eid in enumerate(prov["topk_ids"])}
        for j, eid in enumerate(prov["example_ids"]):
            topk = None
            if eid in topk_pos:
                a, b = toff[topk_pos[eid]], toff[topk_pos[eid] + 1]
                topk = {k: t[k][:, :, a:b] for k in ("attended_idx", "attended_val", "attending_idx", "attending_val")}
            examples[eid] = ExampleAttention(
                eid, t["input_ids"][off[j] : off[j + 1]], t["received"][:, :, off[j] : off[j + 1]], topk
            )
        aggregate = t["aggregate"] if aggregate is None else aggregate + t["aggregate"]
        count = t["position_count"]
    if aggregate is None:
        raise ValueError("no attention shards given")
    return AttentionSummaries(examples, aggregate, count)


def load_bands(paths: Sequence, example_id: str) -> tuple[list[Band], torch.Tensor]:
    """The stored bands (one per layer) and input ids of a showcased example."""
    key = band_key(example_id)
    for path in paths:
        t, prov = load_tensors(path, BANDS_SCHEMA)
        if example_id not in prov["example_ids"]:
            continue
        ids = t[f"{key}|input_ids"].long()
        gpos = t[f"{key}|global_positions"].long()
        bands = []
        layer = 0
        while f"{key}|{layer}|local" in t:
            bands.append(Band(t[f"{key}|{layer}|local"], t.get(f"{key}|{layer}|global"), len(ids), gpos))
            layer += 1
        return bands, ids
    raise KeyError(f"no stored attention bands for example {example_id!r}")


# --- top-k counts by token type and by position (recipes §7 steps 3–8) ----------------------


#: Columns of the top-k tables :func:`count_topk` and :func:`intersect_counts` give (``topk_<name>.csv``).
TOPK_COLUMNS = {
    "attended_by_type": ("token", "count"),
    "attended_by_position": ("token", "position", "count"),
    "attending_by_type": ("token", "count"),
    "attending_by_position": ("token", "position", "count"),
    "intersection_by_type": ("token", "count_attended", "count_attending"),
    "intersection_by_position": ("token", "position", "count_attended", "count_attending"),
    "token_occurrences": ("token", "position", "count"),
}


def count_topk(partners: torch.Tensor, labels: Sequence[str], keep) -> tuple:
    """Counts of one example's top-k partners over all layers and heads.

    Args:
        partners: ``(L, H, n, k)`` partner positions (−1 = none) of every self position.
        labels: ``(n,)`` display string of every position (the token "type").
        keep: ``(n,)`` bool mask of partners that count (applied after the top-k, as in the original).

    Returns:
        ``(by_type, by_position)`` data frames: ``token, count`` and ``token, position, count``, where a
        count is the number of self positions having that token (resp. position) among their surviving
        partners in any layer and head; sorted by count (descending), then token / position.
    """
    n = partners.shape[2]
    keep = np.asarray(keep, dtype=bool)
    flat = partners.permute(2, 0, 1, 3).reshape(n, -1).numpy().astype(np.int64)
    self_pos = np.broadcast_to(np.arange(n)[:, None], flat.shape)
    valid = flat >= 0
    valid[valid] = keep[flat[valid]]
    selves, others = self_pos[valid], flat[valid]
    pairs = np.unique(selves * n + others)
    pos_count = np.bincount(pairs % n, minlength=n)
    types, inverse = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    type_pairs = np.unique(selves * len(types) + inverse[others])
    type_count = np.bincount(type_pairs % len(types), minlength=len(types))
    by_type = pd.DataFrame({"token": types, "count": type_count})
    by_type = by_type[by_type["count"] > 0].sort_values(["count", "token"], ascending=[False, True], kind="stable")
    labels_arr = np.asarray(labels, dtype=object)
    by_pos = pd.DataFrame({"token": labels_arr, "position": np.arange(n), "count": pos_count})
    by_pos = by_pos[by_pos["count"] > 0].sort_values(["count", "position"], ascending=[False, True], kind="stable")
    return by_type.reset_index(drop=True), by_pos.reset_index(drop=True)


def intersect_counts(attended, attending, top_n: int, on: str):
    """Inner join of the top ``top_n`` rows of the attended and attending tables (paper Fig 7)."""
    a = attended.head(top_n).rename(columns={"count": "count_attended"})
    b = attending.head(top_n).rename(columns={"count": "count_attending"})
    if on == "token":
        return a.merge(b, on="token", how="inner")
    return a.merge(b.drop(columns="token"), on="position", how="inner")
