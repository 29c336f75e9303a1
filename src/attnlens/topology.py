"""Attention topology: mutual-information distances, persistence diagrams, bottleneck distances.

The claim under test (a companion study): turn a text's attention into a mutual-information (MI)
matrix between its units, use ``MI⁻¹(I, J) = 2·ln 2 − MI(I, J)`` as a distance, take the
Vietoris–Rips persistent homology of that distance, and compare two texts by the bottleneck distance
between their persistence diagrams; small distance is said to mean semantically similar texts.

**Units.** Special tokens are dropped (CLS is global and soaks up attention; its row says nothing
about the text). The remaining tokens are pooled into units (``pooling``): consecutive chunks of
``chunk_size`` tokens (default), sentences (split after ``.``/``!``/``?`` tokens), or single tokens
(``none``, for short texts). The pooled attention of unit ``I`` to unit ``J`` in one layer and head is
``S[I, J] = (1/|I|) Σ_{i∈I} Σ_{j∈J} A[i, j]``: the attention mass a query of ``I`` sends to ``J`` on
average. On a band it is summed straight from the band (local window slots, the local rows'
global slots and the global tokens' own rows); pairs outside the band have zero attention, so they
add nothing to ``S`` and — when the whole unit pair lies outside the band — get MI 0, i.e. the
largest distance. Dense attention of any encoder is pooled the same way.

**Estimators** (each summed over the chosen layers and heads; ``0·log 0 = 0``):

* ``pooled_pmi`` (a): ``MI[I, J] = Σ_{l,h} max(0, log₂(S_lh[I, J] / (f_I f_J)))`` with ``f_I`` the
  mean, over the tokens of ``I``, of their token type's relative frequency in the text;
* ``joint_ppmi`` (b): ``P = S_lh / Σ S_lh`` (a joint distribution), ``r`` its row sums,
  ``MI[I, J] = Σ_{l,h} max(0, log₂(P[I, J] / (r_I r_J)))``;
* ``xlogy`` (c): ``P`` as in (b), ``r`` and ``c`` its row and column sums,
  ``MI[I, J] = Σ_{l,h} max(0, P[I, J] · ln(P[I, J] / (r_I c_J + ε)))`` — the pointwise summand of
  ``I(P)`` (nats), with ``ε`` guarding empty rows and columns.

Negative pointwise terms (less co-attention than independence predicts) are set to 0: ``MI⁻¹`` needs
``MI ≥ 0``, and "no information" is the natural reading. ``MI`` is made symmetric by
``(MI + MIᵀ) / 2``.

**Distance.** ``MI`` is not bounded by ``2 ln 2`` (PPMI of a peaked ``m``-unit distribution reaches
``log₂ m``), so ``2 ln 2 − MI`` can be negative. ``distance: rescale`` (default) maps each text's
largest off-diagonal MI to 0 and MI 0 to ``2 ln 2``: ``d = 2 ln 2 · (1 − MI / max MI)`` — every
distance lies in ``[0, 2 ln 2]``, and texts of different lengths and attention sharpness are
compared by the shape of their MI structure. ``distance: clip`` is the literal formula clipped at 0,
``d = max(0, 2 ln 2 − MI)``, which saturates (many distances 0) when MI is large. The diagonal is 0.

**Persistence.** gudhi's Rips complex of ``d`` up to ``max_dimension`` (H0, H1 by default), optionally
truncated at ``max_edge_length`` or sparsified (gudhi's ``sparse`` parameter). Infinite bars (the one
H0 component that never dies, and any class still alive at the truncation) are kept with their flag
and capped at the filtration's end (``2 ln 2`` or ``max_edge_length``) so bottleneck distances stay
finite and comparable; the cap is recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gudhi
import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from scipy import sparse
from scipy.special import xlogy

from attnlens.attention.band import Band
from attnlens.attention.layers import layer_slice
from attnlens.io import load_shards
from attnlens.stats import not_computable, permutation_p_value
from attnlens.tokens import display_tokens, structural_mask

ESTIMATORS = ("pooled_pmi", "joint_ppmi", "xlogy")
POOLINGS = ("chunks", "sentences", "none")
DISTANCES = ("rescale", "clip")
TWO_LN2 = 2 * math.log(2)
EPS = 1e-12
DIAGRAMS_SCHEMA = "persistence_diagrams/v1"
MATRICES_SCHEMA = "topology_matrices/v1"
BOTTLENECK_SCHEMA = "bottleneck/v1"
#: Columns of a ``topology`` shard's persistence diagrams, one row per bar.
DIAGRAMS_TYPES = pa.schema([
    ("example_id", pa.string()), ("estimator", pa.string()), ("dim", pa.int64()), ("birth", pa.float64()),
    ("death", pa.float64()), ("infinite", pa.bool_()), ("cap", pa.float64()),
])  # fmt: skip
SENTENCE_END = frozenset({".", "!", "?"})


# --- units ----------------------------------------------------------------------------------------


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


# --- pooled attention -----------------------------------------------------------------------------


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


# --- MI estimators and the distance -----------------------------------------------------------------


def mutual_information(pooled: np.ndarray, estimator: str, freqs: np.ndarray | None = None) -> np.ndarray:
    """``(m, m)`` symmetric non-negative MI of one text from ``(L, H, m, m)`` pooled attention (module docstring)."""
    s = np.asarray(pooled, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if estimator == "pooled_pmi":
            if freqs is None:
                raise ValueError("pooled_pmi needs the unit frequencies")
            ratio = s / np.outer(freqs, freqs)
            terms = np.where(s > 0, np.log2(np.where(s > 0, ratio, 1.0)), 0.0)
        elif estimator in ("joint_ppmi", "xlogy"):
            total = s.sum((-2, -1), keepdims=True)
            p = np.where(total > 0, s / np.where(total > 0, total, 1.0), 0.0)
            r = p.sum(-1)
            if estimator == "joint_ppmi":
                ratio = p / (r[..., :, None] * r[..., None, :])
                terms = np.where(p > 0, np.log2(np.where(p > 0, ratio, 1.0)), 0.0)
            else:
                c = p.sum(-2)

                terms = xlogy(p, p / (r[..., :, None] * c[..., None, :] + EPS))
        else:
            raise ValueError(f"unknown estimator {estimator!r}; expected one of {ESTIMATORS}")
    mi = np.maximum(terms, 0.0).sum(tuple(range(terms.ndim - 2)))
    return (mi + mi.T) / 2


def mi_distance(mi: np.ndarray, how: str = "rescale") -> np.ndarray:
    """``MI⁻¹ = 2 ln 2 − MI`` made a distance: ``rescale`` to ``[0, 2 ln 2]`` or ``clip`` at 0; zero diagonal."""
    mi = np.asarray(mi, dtype=np.float64)
    off = ~np.eye(len(mi), dtype=bool)
    if how == "rescale":
        top = mi[off].max() if off.any() else 0.0
        d = TWO_LN2 * (1 - mi / top) if top > 0 else np.full(mi.shape, TWO_LN2)
    elif how == "clip":
        d = np.maximum(0.0, TWO_LN2 - mi)
    else:
        raise ValueError(f"unknown distance {how!r}; expected one of {DISTANCES}")
    d = np.clip((d + d.T) / 2, 0.0, None)
    np.fill_diagonal(d, 0.0)
    return d


# --- persistence and bottleneck -----------------------------------------------------------------


def persistence(
    distance: np.ndarray, max_dimension: int = 1, max_edge_length: float | None = None, sparse: float | None = None
) -> tuple[dict[int, np.ndarray], float]:
    """Rips persistence of a distance matrix with gudhi: ``({dim: (k, 3) [birth, death, infinite]}, cap)``.

    Infinite deaths are replaced by ``cap`` (the filtration's end: ``max_edge_length`` or the largest
    distance) and flagged in the third column. Zero-length bars (points on the diagonal, e.g. the pair
    that rescaling puts at distance 0) are not reported; they cannot change a bottleneck distance.
    """
    d = np.asarray(distance, dtype=np.float64)
    cap = float(max_edge_length) if max_edge_length is not None else (float(d.max()) if d.size else 0.0)
    kwargs = {"distance_matrix": d, "max_edge_length": cap if max_edge_length is not None else float("inf")}
    if sparse is not None:
        kwargs["sparse"] = sparse
    tree = gudhi.RipsComplex(**kwargs).create_simplex_tree(max_dimension=max_dimension + 1)
    tree.compute_persistence(homology_coeff_field=2, min_persistence=0)
    out = {}
    for dim in range(max_dimension + 1):
        bars = np.asarray(tree.persistence_intervals_in_dimension(dim), dtype=np.float64).reshape(-1, 2)
        infinite = ~np.isfinite(bars[:, 1])
        bars[infinite, 1] = cap
        out[dim] = np.column_stack([bars, infinite.astype(np.float64)])
    return out, cap


def bottleneck(a: np.ndarray, b: np.ndarray) -> float:
    """Bottleneck distance of two diagrams (``(k, 2+)`` birth, death; infinite bars already capped)."""
    return float(gudhi.bottleneck_distance(np.asarray(a)[:, :2], np.asarray(b)[:, :2], 0.0))


def bottleneck_matrix(diagrams: Sequence[np.ndarray]) -> np.ndarray:
    """Symmetric ``(N, N)`` bottleneck distances, zero diagonal."""
    n = len(diagrams)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = bottleneck(diagrams[i], diagrams[j])
    return out


# --- the claim: same class closer than different class? -------------------------------------------


def class_separation(distance: np.ndarray, labels: np.ndarray, n_permutations: int, seed: int) -> dict:
    """Mean same-class and different-class distance, a label-permutation test, and 1-NN accuracy.

    ``gap`` = mean different-class − mean same-class distance (positive supports the claim); its
    permutation p-value is the share of label shuffles with a gap at least as large. The 1-nearest-
    neighbour accuracy (leave one out) is compared with the majority-class rate and its own
    permutation p-value. With fewer than 3 examples, or when every pair is equally far (e.g. no H1 bar
    in any text), the test is ``degenerate`` and its p-values and accuracy are ``None``; ``note`` says
    why a number is missing (also a gap without two classes among the examples).
    """
    d = np.asarray(distance, dtype=np.float64)
    y = np.asarray(labels)
    n = len(y)
    iu = np.triu_indices(n, 1)

    def gap_of(lab):
        same = lab[iu[0]] == lab[iu[1]]
        if same.all() or not same.any():
            return float("nan"), float("nan"), float("nan")
        ds, dd = d[iu][same].mean(), d[iu][~same].mean()
        return float(ds), float(dd), float(dd - ds)

    masked = d + np.diag(np.full(n, np.inf))
    nearest = masked.argmin(1) if n > 1 else np.zeros(n, dtype=int)

    def knn(lab):
        return float((lab[nearest] == lab).mean())

    same, diff, gap = gap_of(y)
    flat = n >= 3 and np.ptp(d[iu]) == 0  # every pair equally far (e.g. no H1 bar anywhere): nothing to test
    notes = []
    if n and len(np.unique(y)) < 2:
        notes.append(not_computable(n, "every example has the same class: no different-class pair, no gap"))
    if n < 3:
        notes.append(not_computable(n, "the label-permutation and 1-NN tests need 3 examples"))
    elif flat:
        notes.append("every pair is equally far (e.g. no bar in any diagram): nothing to test")
    elif not n_permutations:
        notes.append("no p-values: topology.n_permutations is 0")
    if n < 3 or flat:
        return {"n_examples": int(n), "mean_same_class": same, "mean_different_class": diff, "gap": gap,
                "gap_p_value": None, "knn_accuracy": None, "knn_majority_rate": None, "knn_p_value": None,
                "n_permutations": int(n_permutations), "degenerate": True, "note": "; ".join(notes)}  # fmt: skip
    acc = knn(y)
    rng = np.random.default_rng(seed)
    perm_gaps, perm_acc = [], []
    for _ in range(n_permutations):
        p = rng.permutation(y)
        perm_gaps.append(gap_of(p)[2])
        perm_acc.append(knn(p))
    perm_gaps, perm_acc = np.asarray(perm_gaps), np.asarray(perm_acc)
    majority = float(np.bincount(y.astype(int)).max() / n) if n else float("nan")
    return {
        "n_examples": int(n),
        "mean_same_class": same,
        "mean_different_class": diff,
        "gap": gap,
        "gap_p_value": permutation_p_value(gap, perm_gaps) if n_permutations else None,
        "knn_accuracy": acc,
        "knn_majority_rate": majority,
        "knn_p_value": permutation_p_value(acc, perm_acc) if n_permutations else None,
        "n_permutations": int(n_permutations),
        "degenerate": False,
        "note": "; ".join(notes),
    }


def diagrams_frame(example_id: str, estimator: str, diagrams: dict[int, np.ndarray], cap: float) -> pd.DataFrame:
    """Tidy rows ``example_id, estimator, dim, birth, death, infinite, cap``."""
    parts = [
        pd.DataFrame(
            {
                "example_id": example_id,
                "estimator": estimator,
                "dim": dim,
                "birth": bars[:, 0],
                "death": bars[:, 1],
                "infinite": bars[:, 2].astype(bool),
                "cap": cap,
            }
        )
        for dim, bars in diagrams.items()
    ]
    return pd.concat(parts, ignore_index=True)


def example_topology(
    pooled: np.ndarray, freqs: np.ndarray, cfg
) -> dict[str, tuple[np.ndarray, np.ndarray, dict, float]]:
    """``estimator → (MI, distance, diagrams, cap)`` for one text's pooled attention."""
    out = {}
    for est in cfg.estimators:
        mi = mutual_information(pooled, est, freqs)
        d = mi_distance(mi, cfg.distance)
        diagrams, cap = persistence(d, cfg.max_dimension, cfg.max_edge_length, cfg.sparse)
        out[est] = (mi, d, diagrams, cap)
    return out


def load_diagrams(paths: Sequence) -> pd.DataFrame:
    return load_shards(paths, DIAGRAMS_SCHEMA, DIAGRAMS_TYPES)


# --- any encoder, one text at a time (study 3 meets study 2) ---------------------------------------


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
