"""Every ablation's answer scores from a tree of shared prefixes (:mod:`attnlens.generation.prefix_tree`) on tiny
causal language models of each decoder family, against one plain batch of whole sequences.

Bounds: float64 models, so the tree's batched forwards over gathered caches differ from whole sequences only in
the order of their sums: 1e-12 absolute on log-probabilities of order 1–10, as in test_ablation.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnlens.generation.ablation import answer_token_log_probs
from attnlens.generation.prefix_tree import prefix_tree, tree_log_probs
from tests.support.ablated import KINDS, SPANS
from tests.support.ablated import ablations as _ablations
from tests.support.tiny_models import tiny_decoder

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

EVERY = np.array(list(itertools.product([True, False], repeat=len(SPANS))))  # the 64 ablations of six sources


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("removal", ["delete", "mask"])
def test_every_ablation_from_the_tree_equals_recomputing_every_prompt(kind, removal):
    """All 64 ablations of six sources (and a repeated mask): windows of 5 keys bind on 34 tokens in the windowed
    families, so most nodes run alone there; elsewhere batches gather caches of different lengths."""
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    masks = np.concatenate([EVERY, EVERY[5:6]])
    _, sequences, keep = _ablations(masks, removal)
    expected = np.stack(answer_token_log_probs(model, sequences, [3] * len(masks), keep, batch_size=16))
    for batch_size, overhead in ((1, 0), (4, 2), (16, 1000)):
        got, _ = tree_log_probs(model, sequences, 3, keep, batch_size=batch_size, overhead=overhead)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_the_tree_runs_each_shared_stretch_once():
    """Deleting any of six 4-token sources between a 2-token head and a 5-token template tail: the tree runs the
    head once, one source at each branch (2⁰ + 2¹ + … + 2⁵ = 63 sources of 4 tokens) and, for each of the 64
    ablations, what follows its last source (the tail and the answer's first two tokens: 7), counted by the
    embedding's inputs: 702 tokens, under half the 1 408 of 64 whole sequences (with sources this short the
    tails dominate)."""
    model = tiny_decoder("llama", head="causal_lm", implementation="sdpa")
    _, sequences, _ = _ablations(EVERY, "delete")
    counted: list[int] = []
    handle = model.model.embed_tokens.register_forward_hook(lambda m, args, out: counted.append(args[0].numel()))
    try:
        _, count = tree_log_probs(model, sequences, 3, batch_size=1, overhead=0)
    finally:
        handle.remove()
    assert count == 2 + 63 * 4 + 64 * 7 == sum(counted)
    assert sum(len(s) for s in sequences) == 1408


def test_the_radix_tree_splits_where_keys_part_and_hangs_repeats_together():
    root, count = prefix_tree([[1, 2, 3], [1, 2, 4], [1, 2], [1, 2, 3], [5]], [(9,)] * 5)
    (a, b) = sorted(root.children, key=lambda n: n.start + n.seq)  # [1, 2] and [5], both from the root
    assert (a.start, a.end, a.answers) == (0, 2, {(9,): [2]})
    assert sorted((c.start, c.end, c.answers[(9,)]) for c in a.children) == [(2, 3, [0, 3]), (2, 3, [1])]
    assert (b.start, b.end) == (0, 1) and count == 2 + 1 + 1 + 1 + 4


def test_bad_sequences_are_refused():
    model = tiny_decoder("llama", head="causal_lm", implementation="sdpa")
    ids = torch.arange(5, 15).tolist()
    with pytest.raises(ValueError, match="answer of 3 tokens"):
        tree_log_probs(model, [ids], 3, keep=[[1] * 8 + [0, 1]])
    with pytest.raises(ValueError, match="answer of 10 tokens"):
        tree_log_probs(model, [ids], 10)
