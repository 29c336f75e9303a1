"""Attention vs attribution similarity (recipes §11): per-example metrics, dataset tables, figures.

For one example, ``a`` is the signed IG attribution per token (raw sums) and ``t`` a received-attention
vector of a layer configuration (``last`` = the paper's "layer 12", ``all``, ``lower``, ``upper``),
unscaled or scaled by head importance (the ``legacy`` min–max matrix in legacy mode, the ``fixed``
one in fixed mode). Every metric is computed for mask ∈ {none, legacy, fixed} and in two modes.

**legacy** — exactly the original notebooks (§11.1, §11.2): the whole sequence including special
tokens; ``mm`` = min–max; masking zero-fills masked entries of ``mm(|a|)`` and ``mm(t)`` and keeps the
length (B-5); ranks are descending, ties broken by ``argsort`` (B-8; stable by default,
``similarity.legacy_sort: numpy`` for the original's platform-dependent order); "RBO" is the ``rbo``
package at ``p = 1`` = average overlap over the full depth (B-6); the top-5 % sets are
``{i : v_i ≥ pct95(v), v_i ≠ 0}``; 95th rank cosine and 95th AO use the hard-coded depth 102 (B-10).

**fixed** — special tokens dropped, masks select positions instead of zero-filling, Spearman ρ and
Kendall τ-b on the values with ties kept, top-weighted RBO with explicit ``p`` (extrapolated, on
descending stable orders), top-``k`` sets with ``k = ⌈f · n_valid⌉`` by stable sort. Rank metrics
use ``|a|`` (attention is non-negative; the question is whether it goes where the magnitude is);
the raw cosine keeps the signed ``a`` in both modes.

**Chance baseline** (both modes): the same metric with ``a`` permuted ``n_permutations`` times (over
the whole sequence in legacy mode, so the legacy masking artefact is part of its chance level; within
the kept positions in fixed mode). Each row stores the metric, the permutation mean and standard
deviation, ``z = (value − chance) / sd`` and the permutation p-value ``(1 + #{perm ≥ value}) / (P + 1)``.

Every vectorised metric is checked in ``tests/unit/similarity/test_similarity.py`` against scipy, the ``rbo`` package
and brute-force transcriptions of the notebooks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.attention.layers import LAYER_CONFIGURATIONS, layer_slice
from attnlens.data.tokens import structural_mask, token_mask
from attnlens.errors import InputError
from attnlens.io import load_shards
from attnlens.sharding import example_rng
from attnlens.similarity.measures import (
    average_overlap,
    dense_ranks,
    descending_positions,
    jaccard_sets,
    kendall_tau_b,
    legacy_ranks,
    legacy_top_set,
    minmax,
    overlap_curve,
    rbo_ext,
    zero_below,
)
from attnlens.stats import (
    cosine,
    n_top,
    pearson,
    permutation_p_value,
)

MASKS = ("none", "legacy", "fixed")
MODES = ("legacy", "fixed")
#: ``2048 − ⌈0.95 · 2048⌉``: the original's hard-coded depth of the 95th rank cosine and AO (B-10).
LEGACY_DEPTH_95 = 2048 - math.ceil(2048 * 0.95)
LEGACY_METRICS = (
    "cosine_raw",
    "cosine",
    "cosine_median",
    "cosine_mean",
    "cosine_p95",
    "rank_cosine",
    "kendall_tau",
    "rbo_ao",
    "jaccard_top5",
    "rank_cosine_p95",
    "rbo_ao_p95",
)
#: Bug ids of docs/deviations.md whose legacy behaviour the fixed metrics change.
DEVIATIONS = ("B-5", "B-6", "B-7", "B-8", "B-10", "B-11")
SIMILARITY_SCHEMA = "similarity/v2"
HEADS_SCHEMA = "head_agreement/v1"
#: Columns of a ``compare`` shard, one row per example × explained target × configuration × scaling × mask × mode ×
#: metric (``target``, ``target_rank``: the attribution's, :data:`attnlens.attribution.artifacts.ATTRIBUTION_TYPES`).
SIMILARITY_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("target", pa.int64()),
        ("target_rank", pa.int64()),
        ("configuration", pa.string()),
        ("scaled", pa.bool_()),
        ("mask", pa.string()),
        ("mode", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("chance", pa.float64()),
        ("chance_sd", pa.float64()),
        ("z", pa.float64()),
        ("p_perm", pa.float64()),
        ("n", pa.int64()),
    ]
)
COLUMNS = tuple(SIMILARITY_TYPES.names)
#: Columns of a ``compare`` shard's per-head agreement, one row per example × layer × head.
HEADS_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("layer", pa.int64()),
        ("head", pa.int64()),
        ("spearman", pa.float64()),
        ("jaccard_top5", pa.float64()),
        ("n", pa.int64()),
    ]
)


def fixed_metrics(rbo_p: Sequence[float]) -> tuple[str, ...]:
    """Names of the fixed-mode metrics for the configured RBO persistence values."""
    return (
        "cosine_raw",
        "cosine",
        "spearman",
        "kendall_tau_b",
        "rbo_ao",
        *(rbo_name(p) for p in rbo_p),
        "jaccard_top5",
    )


def rbo_name(p: float) -> str:
    return f"rbo_p{p:g}"


# --- per-example comparison ----------------------------------------------------------------------


@dataclass(frozen=True)
class _LegacySide:
    """Everything of one side (attribution rows or one attention vector) the legacy metrics reuse."""

    norm: np.ndarray  # mm(v), masked entries 0
    median: np.ndarray
    mean: np.ndarray
    p95: np.ndarray
    top: np.ndarray  # legacy top-5 % membership
    ranks: np.ndarray  # descending tie-broken ranks
    ranks_p95: np.ndarray  # ranks > 102 set to 0

    @classmethod
    def of(cls, v: np.ndarray, keep: np.ndarray | None, sort: str = "stable") -> _LegacySide:
        norm = minmax(np.atleast_2d(v))
        if keep is not None:
            norm = np.where(keep, norm, 0.0)
        ranks = legacy_ranks(norm, sort)
        return cls(
            norm=norm,
            median=zero_below(norm, np.percentile(norm, 50, axis=-1)),
            mean=zero_below(norm, norm.mean(-1)),
            p95=zero_below(norm, np.percentile(norm, 95, axis=-1)),
            top=legacy_top_set(norm),
            ranks=ranks,
            ranks_p95=np.where(ranks > LEGACY_DEPTH_95, 0, ranks),
        )


def legacy_metrics(
    a_rows: np.ndarray, side_a: _LegacySide, t: np.ndarray, side_t: _LegacySide
) -> dict[str, np.ndarray]:
    """Legacy metrics of every attribution row against one attention vector (recipes §11.1, §11.2)."""
    overlap = overlap_curve(side_a.ranks, side_t.ranks)
    return {
        "cosine_raw": cosine(a_rows, t),
        "cosine": cosine(side_a.norm, side_t.norm),
        "cosine_median": cosine(side_a.median, side_t.median),
        "cosine_mean": cosine(side_a.mean, side_t.mean),
        "cosine_p95": cosine(side_a.p95, side_t.p95),
        "rank_cosine": cosine(side_a.ranks.astype(np.float64), side_t.ranks.astype(np.float64)),
        "kendall_tau": kendall_tau_b(side_t.ranks[0], side_a.ranks),
        "rbo_ao": average_overlap(overlap),
        "jaccard_top5": jaccard_sets(side_a.top, side_t.top),
        "rank_cosine_p95": cosine(side_a.ranks_p95.astype(np.float64), side_t.ranks_p95.astype(np.float64)),
        "rbo_ao_p95": average_overlap(overlap, LEGACY_DEPTH_95),
    }


@dataclass(frozen=True)
class _FixedSide:
    signed: np.ndarray
    norm: np.ndarray  # mm(|v|)
    avg_ranks: np.ndarray  # average ranks of |v| (Spearman)
    positions: np.ndarray  # stable descending order positions of |v| (RBO, top-k)

    @classmethod
    def of(cls, v: np.ndarray, perms: np.ndarray | None = None) -> _FixedSide:
        """One vector, or (``perms`` given) its rows ``v[perms[r]]`` with row 0 the identity."""
        from scipy.stats import rankdata  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

        mag = np.abs(v)
        avg = rankdata(mag)
        if perms is not None:
            signed, mag, avg = v[perms], mag[perms], avg[perms]
        else:
            signed, mag, avg = v[None], mag[None], avg[None]
        return cls(signed, minmax(mag), avg, descending_positions(mag))


def fixed_metrics_rows(
    side_a: _FixedSide, dense_a: np.ndarray, t: np.ndarray, rbo_p: Sequence[float], top_fraction: float
) -> dict[str, np.ndarray]:
    """Fixed metrics of every attribution row against one attention vector (kept positions only)."""
    side_t = _FixedSide.of(t)
    overlap = overlap_curve(side_a.positions, side_t.positions)
    k = n_top(top_fraction, len(t))
    inter = overlap[:, k - 1]
    out = {
        "cosine_raw": cosine(side_a.signed, t),
        "cosine": cosine(side_a.norm, side_t.norm),
        "spearman": pearson(side_a.avg_ranks, side_t.avg_ranks),
        "kendall_tau_b": kendall_tau_b(t, dense_a),
        "rbo_ao": average_overlap(overlap),
    }
    for p in rbo_p:
        out[rbo_name(p)] = rbo_ext(overlap, p)
    out["jaccard_top5"] = inter / (2 * k - inter)
    return out


def fixed_agreement(
    a: np.ndarray, vectors: Mapping, perms: np.ndarray, rbo_p: Sequence[float], top_fraction: float
) -> dict:
    """Fixed-mode metrics of every vector against ``a`` (both over the kept positions only).

    ``perms`` are the rows of :func:`permutations` (row 0 the identity): each metric comes back as
    ``(len(perms),)`` values, the observed one first, for :func:`chance_stats`.
    """
    side_a = _FixedSide.of(a, perms)
    dense_a = dense_ranks(np.abs(a))[perms]
    return {key: fixed_metrics_rows(side_a, dense_a, t, rbo_p, top_fraction) for key, t in vectors.items()}


def vector_agreement(a: np.ndarray, t: np.ndarray, rbo_p: Sequence[float], top_fraction: float) -> dict[str, float]:
    """Fixed-mode metrics of one signed attribution ``a`` against one non-negative vector ``t`` (both over the kept
    positions), exactly as :func:`compare_example` computes them against an attention vector."""
    a = np.asarray(a, dtype=np.float64)
    rows = fixed_metrics_rows(
        _FixedSide.of(a), dense_ranks(np.abs(a))[None], np.asarray(t, dtype=np.float64), rbo_p, top_fraction
    )
    return {name: float(values[0]) for name, values in rows.items()}


def permutations(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """``(count + 1, n)`` index rows: the identity, then ``count`` random permutations."""
    rows = np.tile(np.arange(n), (count + 1, 1))
    if count:
        rows[1:] = rng.permuted(rows[1:], axis=1)
    return rows


def chance_stats(values: np.ndarray) -> tuple[float, float, float, float, float]:
    """(value, chance mean, chance sd, z, permutation p) from row 0 = observed, rows 1… = permuted."""
    v = float(values[0])
    perm = values[1:]
    perm = perm[~np.isnan(perm)]
    if not len(perm) or np.isnan(v):
        return v, float("nan"), float("nan"), float("nan"), float("nan")
    mean, sd = float(perm.mean()), float(perm.std(ddof=1)) if len(perm) > 1 else float("nan")
    z = (v - mean) / sd if sd and sd > 0 else float("nan")
    return v, mean, sd, z, permutation_p_value(v, perm, atol=1e-12)


def attention_vectors(
    received: np.ndarray, importance: Mapping[str, np.ndarray]
) -> dict[tuple[str, str, bool], np.ndarray]:
    """``(mode, configuration, scaled) → (n,)`` received attention (recipes §11 ``att12``, ``attAll``, …)."""
    per_head = received.astype(np.float64)
    out = {}
    for layers in LAYER_CONFIGURATIONS:
        sl = layer_slice(len(per_head), layers)
        unscaled = per_head[sl].sum((0, 1))
        for mode in MODES:
            out[(mode, layers, False)] = unscaled
            out[(mode, layers, True)] = np.einsum("lhn,lh->n", per_head[sl], importance[mode][sl].astype(np.float64))
    return out


def compare_example(
    example_id: str,
    a: np.ndarray,
    received: np.ndarray,
    importance: Mapping[str, np.ndarray],
    keep: Mapping[str, np.ndarray],
    special: np.ndarray,
    *,
    n_permutations: int = 100,
    top_fraction: float = 0.05,
    rbo_p: Sequence[float] = (0.9, 0.98),
    seed: int = 42,
    legacy_sort: str = "stable",
    target: int = 0,
    target_rank: int = 0,
) -> pd.DataFrame:
    """Every metric of one example (and one of its explained targets), both modes, every configuration × scaled ×
    mask, with chance baselines.

    Args:
        example_id: used in the rows and to seed the permutations.
        a: ``(n,)`` signed IG attribution per token.
        received: ``(L, H, n)`` received attention per head.
        importance: ``{"legacy": (L, H), "fixed": (L, H)}`` head importance scaling the scaled rows.
        keep: ``{"legacy": (n,), "fixed": (n,)}`` bool, True where the mask keeps the token.
        special: ``(n,)`` bool, special tokens (dropped by every fixed metric).
        target, target_rank: the explained output ``a`` is for, and its place among the example's targets (the
            rows' ``target`` and ``target_rank``; the permutations depend on the example only, so every target of
            one example meets the same null draws).

    Returns:
        One row per (configuration, scaled, mask, mode, metric) with :data:`COLUMNS`.
    """
    a = np.asarray(a, dtype=np.float64)
    n = len(a)
    if received.shape[-1] != n:
        raise ValueError(f"{example_id}: attention has {received.shape[-1]} tokens, attribution {n}")
    vectors = attention_vectors(received, importance)
    records: list[tuple] = []

    def emit(mode, mask, metrics_by_key, size):
        for (layers, scaled), metrics in metrics_by_key.items():
            for name, values in metrics.items():
                records.append(
                    (example_id, target, target_rank, layers, scaled, mask, mode, name, *chance_stats(values), size)
                )

    keep_of = {"none": None, "legacy": keep["legacy"], "fixed": keep["fixed"]}
    perms = permutations(example_rng(seed, example_id, 0), n, n_permutations)
    a_rows = a[perms]
    abs_rows = np.abs(a_rows)
    for mask in MASKS:
        side_a = _LegacySide.of(abs_rows, keep_of[mask], legacy_sort)
        by_key = {}
        for layers in LAYER_CONFIGURATIONS:
            for scaled in (False, True):
                t = vectors[("legacy", layers, scaled)]
                by_key[(layers, scaled)] = legacy_metrics(
                    a_rows, side_a, t, _LegacySide.of(t, keep_of[mask], legacy_sort)
                )
        emit("legacy", mask, by_key, n)
    names = fixed_metrics(rbo_p)
    for stream, mask in enumerate(MASKS, start=1):
        valid = ~special if keep_of[mask] is None else (keep_of[mask] & ~special)
        idx = np.flatnonzero(valid)
        by_key = {}
        if len(idx) < 2:
            nan = np.full(1, np.nan)
            by_key = {(ly, sc): dict.fromkeys(names, nan) for ly in LAYER_CONFIGURATIONS for sc in (False, True)}
            emit("fixed", mask, by_key, len(idx))
            continue
        sub_perms = permutations(example_rng(seed, example_id, stream), len(idx), n_permutations)
        targets = {(ly, sc): vectors[("fixed", ly, sc)][idx] for ly in LAYER_CONFIGURATIONS for sc in (False, True)}
        emit("fixed", mask, fixed_agreement(a[idx], targets, sub_perms, rbo_p, top_fraction), len(idx))
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def head_agreement(a: np.ndarray, received: np.ndarray, valid: np.ndarray, top_fraction: float) -> pd.DataFrame:
    """Per head: Spearman ρ of its received attention with ``|a|``, and the Jaccard of their top-``k`` sets.

    Fixed recipe on the ``valid`` positions (special tokens dropped); scaling a head by a constant
    changes neither number, so there is no scaled variant.
    """
    from scipy.stats import rankdata  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    idx = np.flatnonzero(valid)
    n_layers, n_heads = received.shape[:2]
    heads = received.reshape(n_layers * n_heads, -1)[:, idx].astype(np.float64)
    mag = np.abs(np.asarray(a, dtype=np.float64)[idx])
    rho = pearson(rankdata(heads, axis=1), rankdata(mag)) if len(idx) > 1 else np.full(len(heads), np.nan)
    k = n_top(top_fraction, len(idx))
    top_a = descending_positions(mag)[0] < k
    top_h = descending_positions(heads) < k
    jac = jaccard_sets(top_h, top_a[None]) if k else np.full(len(heads), np.nan)
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    return pd.DataFrame({"layer": layer, "head": head, "spearman": rho, "jaccard_top5": jac, "n": len(idx)})


# --- rule compare: every example of one attention shard --------------------------------------------


def token_masks(tokenizer, ids: Sequence[int], legacy_mask: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``({"legacy": keep, "fixed": keep}, special)`` for one example's ids (recipes §7.4).

    The legacy mask tests the raw token, as the similarity notebooks did (``Ġthe`` is alphabetic).
    """
    special = structural_mask(tokenizer, ids)
    keep = {
        "legacy": token_mask(tokenizer, ids, legacy_mask, strip_marker=False),
        "fixed": token_mask(tokenizer, ids, "fixed"),
    }
    return keep, special


def load_similarity(paths: Sequence, where: str | None = None, every_target: bool = False) -> pd.DataFrame:
    """Per-example rows of ``compare`` shards, of each example's headline target (``target_rank`` 0; with
    ``every_target``, of every explained target); a folder stands for its ``shard*.parquet`` files."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("shard*.parquet"))
            if not found:
                raise InputError(where or p, "path", f"expected shard*.parquet files of rule compare in {p}")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise InputError(where or p, "path", f"expected a per-example similarity parquet or folder, {p} is missing")
    frame = load_shards(files, SIMILARITY_SCHEMA, SIMILARITY_TYPES)
    return frame if every_target else frame[frame["target_rank"] == 0].reset_index(drop=True)
