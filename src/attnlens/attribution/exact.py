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

Where the ``2ⁿ`` ablations are too many, the Shapley values are estimated by sampling orders
(:func:`permutation_chains`, :func:`permutation_shapley`; Castro et al., 2009): each sampled order adds the
sources one by one, ``n + 1`` masks from none to all, and a source's estimate is its mean marginal contribution
over the orders, unbiased, equal to the exact value when every order is taken.
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


def permutation_chains(n_sources: int, n_orders: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_orders · (n + 1), n)`` bool: for each of ``n_orders`` orders drawn uniformly by ``rng``, the masks that
    add its sources one at a time, from none kept to all kept."""
    chains = np.zeros((n_orders, n_sources + 1, n_sources), dtype=bool)
    for o in range(n_orders):
        order = rng.permutation(n_sources)
        for step in range(1, n_sources + 1):
            chains[o, step] = chains[o, step - 1]
            chains[o, step, order[step - 1]] = True
    return chains.reshape(-1, n_sources)


def permutation_shapley(chains: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``(n,)``: the Shapley values estimated from :func:`permutation_chains`' masks and the score on each: every
    source's marginal contribution, ``F`` after it joins less ``F`` before, averaged over the orders."""
    chains = np.asarray(chains, dtype=bool)
    n = chains.shape[1]
    if len(chains) % (n + 1) or len(scores) != len(chains):
        raise ValueError(f"expected chains of {n + 1} masks and a score each, got {len(chains)} masks")
    masks = chains.reshape(-1, n + 1, n)
    steps = masks[:, 1:] & ~masks[:, :-1]
    if masks[:, 0].any() or (masks[:, :-1] & ~masks[:, 1:]).any() or (steps.sum(axis=2) != 1).any():
        raise ValueError("expected each chain to add one source a step, from none kept to all")
    values = np.asarray(scores, dtype=np.float64).reshape(-1, n + 1)
    added = np.argmax(steps, axis=2)  # (orders, n): the source each step adds
    out = np.zeros(n)
    np.add.at(out, added.ravel(), np.diff(values, axis=1).ravel())
    return out / len(masks)
