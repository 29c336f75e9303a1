"""Exact values of a score known on every ablation (:mod:`attnlens.attribution.exact`) against their definitions
run literally (every order of the sources for Shapley, every coalition for Banzhaf, every k-subset for the best
drop) and against closed forms of games whose values are known.

Bounds: the same float64 sums in another order: 1e-12 absolute on values of order 1 (a few ulps of 2⁵ terms).
"""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest

from attnlens.attribution.exact import best_drops, every_mask, exact_values, permutation_chains, permutation_shapley
from attnlens.generation.answer_leaderboard import looked_up


def _game(n: int, seed: int = 0) -> np.ndarray:
    """A score with interactions: random values on every mask (no structure to lean on)."""
    return np.random.default_rng(seed).normal(size=2**n)


def _value(table: np.ndarray, kept: set[int]) -> float:
    return float(table[sum(1 << i for i in kept)])


def test_every_mask_is_indexed_by_its_bits():
    masks = every_mask(3)
    assert masks.shape == (8, 3) and not masks[0].any() and masks[-1].all()
    assert masks[5].tolist() == [True, False, True]  # 5 = 0b101: sources 0 and 2
    assert len({m.tobytes() for m in every_mask(6)}) == 64
    with pytest.raises(ValueError, match="0 to 20 sources"):
        every_mask(21)


def test_shapley_is_the_mean_marginal_contribution_over_every_order():
    n, table = 5, _game(5)
    expected = np.zeros(n)
    for order in itertools.permutations(range(n)):
        before: set[int] = set()
        for i in order:
            expected[i] += _value(table, before | {i}) - _value(table, before)
            before.add(i)
    expected /= factorial(n)
    np.testing.assert_allclose(exact_values(table).shapley, expected, rtol=0, atol=1e-12)


def test_banzhaf_is_the_mean_marginal_contribution_over_every_coalition_and_loo_the_last_one():
    n, table = 5, _game(5, seed=1)
    values = exact_values(table)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        gains = [
            _value(table, set(c) | {i}) - _value(table, set(c))
            for r in range(n)
            for c in itertools.combinations(others, r)
        ]
        assert values.banzhaf[i] == pytest.approx(np.mean(gains), abs=1e-12)
        assert values.leave_one_out[i] == pytest.approx(_value(table, set(range(n))) - _value(table, set(others)))


def test_closed_forms_an_additive_game_and_a_unanimity_game():
    """An additive score gives every source its own coefficient, under all three; the unanimity game of T (1 where
    every source of T is kept) gives each member 1/|T| (Shapley), 2^{1−|T|} (Banzhaf) and 1 (leave-one-out)."""
    masks = every_mask(6)
    coefficients = np.array([0.5, -1.0, 2.0, 0.0, 3.0, -0.25])
    additive = exact_values(masks @ coefficients + 7.0)
    for values in (additive.shapley, additive.banzhaf, additive.leave_one_out):
        np.testing.assert_allclose(values, coefficients, rtol=0, atol=1e-12)
    team = [1, 3, 4]
    unanimity = exact_values(masks[:, team].all(axis=1).astype(float))
    inside = np.isin(np.arange(6), team)
    np.testing.assert_allclose(unanimity.shapley, np.where(inside, 1 / 3, 0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(unanimity.banzhaf, np.where(inside, 1 / 4, 0), rtol=0, atol=1e-12)
    # why exact: leave-one-out is one subtraction of the game's 0s and 1s, exact in any float
    np.testing.assert_allclose(unanimity.leave_one_out, inside.astype(float), rtol=0, atol=0)


def test_the_best_drop_is_the_largest_over_every_k_subset():
    n, table = 6, _game(6, seed=2)
    full = _value(table, set(range(n)))
    expected = [
        max(full - _value(table, set(range(n)) - set(r)) for r in itertools.combinations(range(n), k))
        for k in (1, 3, 6)
    ]
    # why exact: F(all) − min F and max (F(all) − F) pick the same F, and x ↦ F(all) − x, correctly rounded, is
    # monotone, so both are the one subtraction F(all) − that F
    np.testing.assert_allclose(best_drops(table, (1, 3, 6)), expected, rtol=0, atol=0)
    assert best_drops(table, (9,))[0] == full - table[0]  # k past n removes every source


def test_a_table_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="2ⁿ masks"):
        exact_values(np.zeros(6))


def test_permutation_sampling_is_the_mean_marginal_contribution_over_its_orders():
    """Castro et al.'s estimator: over sampled orders, each source's marginal contribution averaged (the definition
    run on the orders the chains encode); over every order once it is the exact Shapley value; its chains add one
    source a step. Bounds: sums of at most 120 float64 terms of order 1, 1e-12."""
    n, table = 5, _game(5, seed=3)
    chains = permutation_chains(n, 7, np.random.default_rng(11))
    assert chains.shape == (7 * (n + 1), n)
    got = permutation_shapley(chains, looked_up(table, chains))
    expected, orders = np.zeros(n), chains.reshape(7, n + 1, n)
    for chain in orders:
        order = [int(np.flatnonzero(b & ~a)[0]) for a, b in itertools.pairwise(chain)]
        assert sorted(order) == list(range(n))  # a permutation of the sources
        before: set[int] = set()
        for i in order:
            expected[i] += _value(table, before | {i}) - _value(table, before)
            before.add(i)
    np.testing.assert_allclose(got, expected / 7, rtol=0, atol=1e-12)
    every = np.concatenate(
        [[[s in order[:step] for s in range(n)] for step in range(n + 1)] for order in itertools.permutations(range(n))]
    )
    np.testing.assert_allclose(
        permutation_shapley(every, looked_up(table, every)), exact_values(table).shapley, rtol=0, atol=1e-12
    )
    with pytest.raises(ValueError, match="one source a step"):
        permutation_shapley(chains[::-1], looked_up(table, chains))
