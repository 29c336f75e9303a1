"""The environment decisions that could silently break numbers.

`rbo` declares numpy<2 but is installed with --no-deps on numpy 2 (pyarrow needs numpy >= 2). Check
it still computes what Webber et al. (2010) define, against an independent implementation, and the
values the similarity stage relies on (legacy "RBO" = average overlap at p = 1, B-6).
"""

import numpy as np
import pytest
import rbo
import torch


def _overlap(s, t, d):
    return len(set(s[:d]) & set(t[:d])) / d


def _rbo_min_reference(s, t, p):
    k = min(len(s), len(t))
    return (1 - p) * sum(p ** (d - 1) * _overlap(s, t, d) for d in range(1, k + 1))


def _average_overlap(s, t):
    k = min(len(s), len(t))
    return float(np.mean([_overlap(s, t, d) for d in range(1, k + 1)]))


def test_numpy_2_and_pinned_torch():
    assert int(np.__version__.split(".")[0]) >= 2
    assert torch.__version__.startswith("2.13.0")


@pytest.mark.parametrize("seed", range(4))
def test_rbo_on_numpy2_matches_reference(seed):
    rng = np.random.default_rng(seed)
    s = rng.permutation(30).tolist()
    t = rng.permutation(30).tolist()[:25]
    sim = rbo.RankingSimilarity(s, t)
    assert sim.rbo(p=1.0) == pytest.approx(_average_overlap(s, t), abs=1e-12)
    assert sim.rbo(p=0.9) == pytest.approx(_rbo_min_reference(s, t, 0.9), abs=1e-12)


def test_rbo_fixed_values():
    s, t = [1, 2, 3, 4, 5, 6, 7], [1, 3, 2, 4, 5, 7, 6, 8]
    assert rbo.RankingSimilarity(s, t).rbo(p=1.0) == pytest.approx(0.9047619047619048)
    assert rbo.RankingSimilarity(s, t).rbo(p=0.9) == pytest.approx(0.4668616)
    assert rbo.RankingSimilarity([1, 2, 3], [1, 2, 3]).rbo() == 1.0
    assert rbo.RankingSimilarity([1, 2, 3], [4, 5, 6]).rbo() == 0.0
