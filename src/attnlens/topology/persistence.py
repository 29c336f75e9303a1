"""Mutual information, its distance, Rips persistence and bottleneck distances of pooled attention, and the
diagrams' artifacts (the method: :mod:`attnlens.topology`). No torch: the rules that draw or compare
diagrams load none."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gudhi
import numpy as np
import pandas as pd
import pyarrow as pa
from scipy.special import xlogy

from attnlens.io import load_shards
from attnlens.stats import not_computable, permutation_p_value

ESTIMATORS = ("pooled_pmi", "joint_ppmi", "xlogy")


DISTANCES = ("rescale", "clip")


TWO_LN2 = 2 * math.log(2)


EPS = 1e-12


DIAGRAMS_SCHEMA = "persistence_diagrams/v1"


MATRICES_SCHEMA = "topology_matrices/v1"


BOTTLENECK_SCHEMA = "bottleneck/v1"


#: Columns of a ``topology`` shard's persistence diagrams, one row per bar.
DIAGRAMS_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("estimator", pa.string()),
        ("dim", pa.int64()),
        ("birth", pa.float64()),
        ("death", pa.float64()),
        ("infinite", pa.bool_()),
        ("cap", pa.float64()),
    ]
)


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
        return {
            "n_examples": int(n),
            "mean_same_class": same,
            "mean_different_class": diff,
            "gap": gap,
            "gap_p_value": None,
            "knn_accuracy": None,
            "knn_majority_rate": None,
            "knn_p_value": None,
            "n_permutations": int(n_permutations),
            "degenerate": True,
            "note": "; ".join(notes),
        }
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
