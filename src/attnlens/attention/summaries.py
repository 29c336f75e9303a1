"""Per-example attention summaries (received attention, top-k partners) and the artifacts of
``extract_attention``: one forward pass per example, summaries per shard, readers that merge the shards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from attnlens.attention import full
from attnlens.attention.band import Band, attention_from, received_attention, topk_attended, topk_attending
from attnlens.attention.full import FullLayer
from attnlens.errors import InputError
from attnlens.io import load_tensors, unpack_strings

# --- extraction: one forward pass per example, summaries per shard ------------------------------


def band_key(example_id: str) -> str:
    """The safetensors key prefix of an example's stored bands (``|`` is not allowed in keys)."""
    return str(example_id).replace("|", "_")


SUMMARY_SCHEMA = "attention_summaries/v1"
BANDS_SCHEMA = "attention_bands/v1"


def compute_example_summaries(bands: Sequence[Band], k: int | None) -> dict[str, torch.Tensor]:
    """``received`` ``(L, H, n)`` and, when ``k`` is given, top-k attended / attending ``(L, H, n, k)``.

    Outputs are allocated once on the CPU and filled layer by layer (indices int32, scores float32), each layer
    summarised on its own device (:mod:`attnlens.attention.topk` off the CPU).
    """
    n_layers, heads, n = len(bands), bands[0].heads, bands[0].n
    out = {"received": torch.zeros(n_layers, heads, n)}
    if k is not None:
        for name in ("attended", "attending"):
            out[f"{name}_idx"] = torch.empty(n_layers, heads, n, k, dtype=torch.int32)
            out[f"{name}_val"] = torch.empty(n_layers, heads, n, k)
    for layer, band in enumerate(bands):
        if not isinstance(band, Band):  # a full layer: one pass over its query blocks for all three
            for key, value in full.summaries(band, k).items():
                out[key][layer] = value.cpu()
            continue
        out["received"][layer] = received_attention(band).cpu()
        if k is not None:
            for name, fn in (("attended", topk_attended), ("attending", topk_attending)):
                idx, val = fn(band, k)
                out[f"{name}_idx"][layer] = idx.cpu()
                out[f"{name}_val"][layer] = val.cpu()
                del idx, val
    return out


def query_attention(bands: Sequence, rows: torch.Tensor) -> torch.Tensor:
    """``(L, H, n)`` float32: per layer and head, the attention the queries ``rows`` (``(n,)`` bool) pay each key,
    summed over the queries (:func:`~attnlens.attention.band.attention_from`: a band's slots and global rows, a
    full layer's query blocks; never a dense row), on the CPU."""
    return torch.stack([attention_from(band, rows).float() for band in bands]).cpu()


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
    #: per query group of the task (``[CLS]``; a question's and its answer's tokens): the attention its tokens pay
    #: each key ``(L, H, n)``, for the groups the example has tokens of
    queries: dict[str, torch.Tensor] = field(default_factory=dict)


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
            queries = {
                name: t[f"query|{name}"][:, :, off[j] : off[j + 1]]
                for name in prov.get("query_groups", [])
                if int(t[f"query|{name}|rows"][j])
            }
            examples[eid] = ExampleAttention(
                eid, t["input_ids"][off[j] : off[j + 1]], t["received"][:, :, off[j] : off[j + 1]], topk, queries
            )
        aggregate = t["aggregate"] if aggregate is None else aggregate + t["aggregate"]
        count = t["position_count"]
    if aggregate is None:
        raise ValueError("no attention shards given")
    return AttentionSummaries(examples, aggregate, count)


def stored_layer(layer, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors that store one layer's attention (float32) under ``prefix``: a band's ``local`` (and
    ``global``) attention, or a full layer's ``query`` and ``key`` (``O(n · d)``, never ``n × n``; a causal layer's
    window beside them, 0 for none), on the CPU."""
    layer = layer.cpu()
    if isinstance(layer, FullLayer):
        out = {f"{prefix}|query": layer.query.float(), f"{prefix}|key": layer.key.float()}
        if layer.causal:  # a decoder's: the window, 0 for every earlier key
            out[f"{prefix}|causal_window"] = torch.tensor([layer.window or 0], dtype=torch.int64)
        return out
    out = {f"{prefix}|local": layer.local.float()}
    if layer.global_ is not None:
        out[f"{prefix}|global"] = layer.global_[:, : layer.n].float()
    return out


def global_positions(layers: Sequence) -> torch.Tensor:
    """The global tokens of an example's bands (none where no layer is a band with global tokens)."""
    for layer in layers:
        if isinstance(layer, Band) and layer.n_global:
            return layer.global_positions
    return torch.zeros(0, dtype=torch.long)


def band_tensors(example_id: str, input_ids: torch.Tensor, layers: Sequence) -> dict[str, torch.Tensor]:
    """What a bands artifact stores of one example (read back by :func:`load_bands`): its ids, global positions
    and every layer's attention (:func:`stored_layer`)."""
    key = band_key(example_id)
    out = {f"{key}|input_ids": input_ids.to(torch.int32), f"{key}|global_positions": global_positions(layers)}
    for layer, band in enumerate(layers):
        out.update(stored_layer(band, f"{key}|{layer}"))
    return out


def load_bands(paths: Sequence, example_id: str) -> tuple[list, torch.Tensor]:
    """The stored attention (one :class:`Band` or :class:`~attnlens.attention.full.FullLayer` per layer) and
    input ids of a showcased example."""
    key = band_key(example_id)
    for path in paths:
        t, prov = load_tensors(path, BANDS_SCHEMA)
        if example_id not in prov["example_ids"]:
            continue
        ids = t[f"{key}|input_ids"].long()
        gpos = t[f"{key}|global_positions"].long()
        layers = []
        layer = 0
        while f"{key}|{layer}|local" in t or f"{key}|{layer}|query" in t:
            prefix = f"{key}|{layer}"
            if f"{prefix}|query" in t:
                causal = f"{prefix}|causal_window" in t
                window = int(t[f"{prefix}|causal_window"][0]) if causal else 0
                layers.append(FullLayer(t[f"{prefix}|query"], t[f"{prefix}|key"], len(ids), causal, window or None))
            else:
                glob = t.get(f"{prefix}|global")
                layers.append(Band(t[f"{prefix}|local"], glob, len(ids), gpos if glob is not None else gpos[:0]))
            layer += 1
        return layers, ids
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


def intersect_counts(attended, attending, top_n: int, key: str):
    """Inner join of the top ``top_n`` rows of the attended and attending tables (paper Fig 7)."""
    a = attended.head(top_n).rename(columns={"count": "count_attended"})
    b = attending.head(top_n).rename(columns={"count": "count_attending"})
    if key == "token":
        return a.merge(b, on="token", how="inner")
    return a.merge(b.drop(columns="token"), on="position", how="inner")
