"""Hierarchical leave-one-out's numerics (:mod:`attnlens.attribution.hierarchy`) against closed forms.

On an additive score ``F(mask) = Σ_k w_k·mask_k`` every drop is a sum of weights, so the search's result is known:
a searched source scores its weight exactly, an unsearched one its group's mean weight, and the groups searched are
those of largest weight sum. Exact arithmetic on small integers: equality.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlens.attribution.hierarchy import group_masks, hierarchical_scores, refined_masks, source_groups


def test_groups_are_paragraphs_where_there_are_several_else_blocks_of_the_root():
    assert source_groups([0, 0, 1, 1, 1, 2]) == [[0, 1], [2, 3, 4], [5]]
    assert source_groups([0] * 10) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # ⌈√10⌉ = 4
    assert source_groups([0, 0, 1, 1, 1, 2], size=4) == [[0, 1, 2, 3], [4, 5]]  # a size given: blocks
    assert source_groups([0]) == [[0]]
    masks = group_masks([[0, 1], [2, 3, 4], [5]], 6)
    assert masks.tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 1], [1, 1, 1, 1, 1, 0]]


def test_on_an_additive_score_the_search_finds_the_heaviest_groups_and_each_of_their_weights():
    w = np.array([5.0, -1.0, 0.0, 2.0, 2.0, 1.0, 9.0, 0.0, 3.0])
    groups = source_groups([0] * 9)  # [0 1 2] [3 4 5] [6 7 8]: sums 4, 5, 12
    full = float(w.sum())

    def score(masks):
        return masks.astype(float) @ w

    first = group_masks(groups, 9)
    drops = full - score(first)
    assert drops.tolist() == [4.0, 5.0, 12.0]
    inside = refined_masks(first, drops, keep=2)  # the two heaviest groups: [6 7 8] and [3 4 5], in source order
    assert [int(np.flatnonzero(~m)[0]) for m in inside] == [3, 4, 5, 6, 7, 8]
    masks = np.vstack([first, inside])
    got = hierarchical_scores(masks, score(masks), full)
    assert got.tolist() == [4 / 3, 4 / 3, 4 / 3, 2.0, 2.0, 1.0, 9.0, 0.0, 3.0]
    everything = np.vstack([first, refined_masks(first, drops, keep=3)])
    np.testing.assert_array_equal(hierarchical_scores(everything, score(everything), full), w)  # = leave-one-out
    assert len(refined_masks(group_masks([[0], [1, 2]], 3), np.array([9.0, 1.0]), keep=1)) == 0  # one source: done


@pytest.mark.parametrize("n", [16, 100, 400])
def test_it_costs_about_three_roots_where_leave_one_out_costs_n(n):
    first = group_masks(source_groups([0] * n), n)
    inside = refined_masks(first, np.arange(len(first), dtype=float), keep=3)
    assert len(first) + len(inside) <= 4 * np.ceil(np.sqrt(n))
