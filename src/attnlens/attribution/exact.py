"""Exact truth where it is affordable: the answer's score ``F`` on every one of the ``2ⁿ`` ablations of ``n``
sources, and what it says about each source and each ranking.

A table of ``F`` over every mask is a cooperative game of the sources. From it, exactly:

* **leave-one-out**: ``F(all) − F(all without i)``;
* **Shapley values**: ``φᵢ = Σ_{S ⊆ N∖i} |S|! (n − |S| − 1)! / n! · (F(S ∪ i) − F(S))``, the average of ``i``'s
  marginal contribution over every order in which the sources could be added (Shapley, 1953);
* **Banzhaf values**: ``βᵢ = 2^{−(n−1)} Σ_{S ⊆ N∖i} (F(S ∪ i) − F(S))``, its average over every coalition;
* **the best achievable top-``k`` drop**: ``F(all) − min_{|R| = k} F(all without R)``, the largest drop any
  ``k`` sources' removal gives, against which a method's top-``k`` drop is a share.

Row ``m`` of :func:`every_mask` keeps source ``i`` where bit ``i`` of ``m`` is set, so the table is indexed by the
mask's bits and each value is a vectorised sum over the ``2ⁿ⁻¹`` coalitions without ``i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np

#: The most sources :func:`every_mask` enumerates (2²⁰ masks; the pipeline's bound is generation.exact.max_sources).
MAX_SOURCES = 20


def every_mask(n_sources: int) -> np.ndarray:
    """``(2ⁿ, n)`` bool: row ``m`` keeps source ``i`` where bit ``i`` of ``m`` is set (row 0 keeps none, the last
    row all)."""
    if not 0 <= n_sources <= MAX_SOURCES:
        raise ValueError(f"expected 0 to {MAX_SOURCES} sources to enumerate, got {n_sources}")
    return (np.arange(2**n_sources)[:, None] >> np.arange(n_sources)) & 1 == 1


@dataclass(frozen=True)
class ExactValues:
    """A score's exact values per source (module docstring), float64, each ``(n,)``."""

    leave_one_out: np.ndarray
    shapley: np.ndarray
    banzhaf: np.ndarray


def _table(table: np.ndarray) -> tuple[np.ndarray, int]:
    table = np.asarray(table, dtype=np.float64)
    n = int(np.log2(len(table))) if len(table) else -1
    if table.ndim != 1 or n < 0 or 2**n != len(table) or n > MAX_SOURCES:
        raise ValueError(f"expected a score for each of the 2ⁿ masks of every_mask(n), got shape {table.shape}")
    return table, n


def exact_values(table: np.ndarray) -> ExactValues:
    """Leave-one-out, Shapley and Banzhaf values of the game ``table`` (``F`` on :func:`every_mask`'s rows)."""
    table, n = _table(table)
    index = np.arange(2**n)
    size = np.bitwise_count(index)
    # weight of a coalition of s others in i's Shapley sum: s! (n − s − 1)! / n! = 1 / (n · C(n − 1, s))
    weight = np.array([1.0 / (n * comb(n - 1, s)) for s in range(n)]) if n else np.zeros(0)
    full = 2**n - 1
    loo, shapley, banzhaf = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(n):
        without = index[(index >> i) & 1 == 0]
        gain = table[without | (1 << i)] - table[without]
        loo[i] = table[full] - table[full ^ (1 << i)]
        shapley[i] = float(weight[size[without]] @ gain)
        banzhaf[i] = float(gain.mean())
    return ExactValues(loo, shapley, banzhaf)


def best_drops(table: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """``(len(ks),)``: for each ``k``, the largest ``F(all) − F(all without R)`` over every set ``R`` of ``k``
    sources (``k`` past ``n`` removes them all, as :func:`~attnlens.attribution.datamodels.top_k_masks` does)."""
    table, n = _table(table)
    kept = np.bitwise_count(np.arange(2**n))
    return np.array([table[-1] - table[kept == n - min(k, n)].min() for k in ks])
