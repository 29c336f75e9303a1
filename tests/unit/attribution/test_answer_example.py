"""The answer methods (their scorers in :mod:`attnlens.attribution.methods`, run by
:func:`attnlens.attribution.engine.explain`) and their judges (:mod:`attnlens.generation.answer_leaderboard`)
against the functions they are built from, called directly, and against hand counts.

Bounds: the tiny decoder is float64 and each method is computed twice from the same float64 passes, so the source
scores agree to float64 rounding of sums of at most a few hundred terms of order 1: 1e-10 absolute.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from attnlens.attribution.answer_example import Ablated, AnswerExample
from attnlens.attribution.datamodels import (
    ablation_masks,
    answer_orders,
    answer_scores,
    fit_surrogate,
    leave_one_out_masks,
    precision_recall_at_k,
)
from attnlens.attribution.engine import explain
from attnlens.attribution.head_weights import learned_scores, source_features
from attnlens.attribution.methods import ANSWER, method_names
from attnlens.attribution.methods.attntrace import TRACE_STREAM
from attnlens.attribution.source_scores import (
    answer_attnlrp,
    answer_gradient_x_input,
    answer_head_attention,
    source_sums,
    top_k_pooled,
)
from attnlens.generation.ablation import answer_token_log_probs, shared_prefix_log_probs
from attnlens.generation.answer_leaderboard import CEILING, answer_metrics, judge_answer, removal_masks
from tests.support.helpers import EPS32
from tests.support.tiny_models import tiny_decoder

PROMPT = [5, 9, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 6]
OWNER = np.array([-1, 0, 0, 0, 1, 1, 2, 2, 2, 3, 3, -1, -1])  # four sources, the template's tokens −1
ANSWER_IDS = [47, 53]


def _keep(masks: np.ndarray) -> list[list[int]]:
    return [[int(o < 0 or m[o]) for o in OWNER] + [1] * len(ANSWER_IDS) for m in masks]


def _masked_scores(model, masks: np.ndarray) -> np.ndarray:
    """The answer's log-probability with each mask's sources' tokens out of attention: the cached ablations."""
    lp = answer_token_log_probs(model, [PROMPT + ANSWER_IDS] * len(masks), [len(ANSWER_IDS)] * len(masks), _keep(masks))
    return answer_scores(np.stack(lp))[0]


def _masked_divergences(model, masks: np.ndarray) -> np.ndarray:
    """Leave-one-out's cached divergences: each answer token's Jensen–Shannon divergence from the whole context's,
    summed, from the shared prefix's forwards (as ``ablate_contexts`` reads them)."""
    ids = PROMPT + ANSWER_IDS
    _, jsd = shared_prefix_log_probs(model, ids, [ids] * len(masks), len(ANSWER_IDS), _keep(masks), divergence=True)
    return jsd.sum(axis=1)


def _direct_divergences(model, masks: np.ndarray) -> np.ndarray:
    """ARC-JSD's definition run literally: a plain forward of the whole sequence and of each masked one, the softmax
    at each row that predicts an answer token, and scipy's Jensen–Shannon distance squared (natural logarithm)."""
    ids = torch.tensor([PROMPT + ANSWER_IDS])
    rows = slice(len(PROMPT) - 1, len(PROMPT) - 1 + len(ANSWER_IDS))
    positions = torch.arange(ids.shape[1])[None]

    def distributions(keep):
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.tensor([keep]), position_ids=positions).logits
        return torch.softmax(logits[0, rows].double(), dim=-1).numpy()

    whole = distributions([1] * ids.shape[1])
    return np.array([(jensenshannon(whole, distributions(k), axis=-1) ** 2).sum() for k in _keep(masks)])


def _marginal_contributions(chains: Ablated) -> np.ndarray:
    """Each source's marginal contribution, ``F`` after it joins less ``F`` before, averaged over the chains'
    orders: a loop over consecutive masks."""
    n = chains.masks.shape[1]
    total = np.zeros(n)
    for o in range(len(chains.masks) // (n + 1)):
        for step in range(o * (n + 1) + 1, (o + 1) * (n + 1)):
            (added,) = np.flatnonzero(chains.masks[step] & ~chains.masks[step - 1])
            total[added] += chains.scores[step] - chains.scores[step - 1]
    return total / (len(chains.masks) // (n + 1))


def _attntrace_literally(x) -> np.ndarray:
    """AttnTrace's loop as its authors write it: per sample, the kept sources' token lists joined between the
    template's (a dense forward with every attention matrix), each kept source's mean of its ``pool_k`` largest
    attentions from the answer's rows averaged over layers and heads, added up; each source's sum over the samples
    that kept it divided by their count. The samples are the method's own seeded draws."""
    rng = np.random.default_rng([x.seed, x.index, TRACE_STREAM])
    ids = x.input_ids[0].tolist()
    total, seen = np.zeros(x.n_sources), np.zeros(x.n_sources)
    for _ in range(x.trace_samples):
        kept = sorted(rng.permutation(x.n_sources)[: max(1, int(x.n_sources * x.trace_keep))])
        tokens = [(t, o) for t, o in zip(ids, x.owner, strict=True) if o < 0 or o in kept]
        with torch.no_grad():
            attentions = x.model(input_ids=torch.tensor([[t for t, _ in tokens]]), output_attentions=True).attentions
        n = len(tokens)
        rows = torch.stack(attentions)[:, 0, :, n - x.answer_length - 1 : n - 1].double()  # (layers, heads, rows, n)
        weights = rows.mean(dim=2).mean(dim=(0, 1)).numpy()
        for source in kept:
            mine = sorted((w for w, (_, o) in zip(weights, tokens, strict=True) if o == source), reverse=True)
            total[source] += np.mean(mine[: x.pool_k])
            seen[source] += 1
    return np.array([t / c if c else 0.0 for t, c in zip(total, seen, strict=True)])


def _searched(x) -> np.ndarray:
    """Hierarchical leave-one-out by its definition: the searched half's sources their own drops, the other half's
    its drop halved."""
    drops = x.full_score - x.hierarchical.scores
    top = int(np.flatnonzero(~x.hierarchical.masks[2])[0]) // 2  # the half whose sources were searched
    other = 1 - top
    out = np.empty(4)
    out[[2 * top, 2 * top + 1]] = drops[2:]
    out[[2 * other, 2 * other + 1]] = drops[other] / 2
    return out


@pytest.fixture(scope="module")
def example():
    model = tiny_decoder("llama", head="causal_lm", seed=4)
    for p in model.parameters():
        p.requires_grad_(False)
    ids = torch.tensor([PROMPT + ANSWER_IDS])
    (full,) = answer_token_log_probs(model, [PROMPT + ANSWER_IDS], [len(ANSWER_IDS)])
    loo = leave_one_out_masks(4)
    random = ablation_masks(4, 24, seed=3)
    chains = answer_orders(0, 0, 4, 3)  # three orders of the four sources
    halves = np.array([[0, 0, 1, 1], [1, 1, 0, 0]], dtype=bool)  # two groups of two sources, then the one that matters
    drops = float(full.sum()) - _masked_scores(model, halves)
    top = int(np.argmax(drops))
    inside = np.ones((2, 4), dtype=bool)
    inside[[0, 1], [2 * top, 2 * top + 1]] = False
    searched = np.vstack([halves, inside])
    owner = np.concatenate([OWNER, [-1] * len(ANSWER_IDS)])
    return AnswerExample(
        model=model,
        input_ids=ids,
        answer_length=len(ANSWER_IDS),
        owner=owner,
        n_sources=4,
        full_score=float(full.sum()),
        n_answer_tokens=len(ANSWER_IDS),
        leave_one_out=Ablated(loo, _masked_scores(model, loo), 0.5, divergence=_masked_divergences(model, loo)),
        random=Ablated(random, _masked_scores(model, random), 2.0),
        permutation=Ablated(chains, _masked_scores(model, chains), 1.0),
        hierarchical=Ablated(searched, _masked_scores(model, searched), 0.25),
        head_weights=np.array([[0.5, -0.25, 0.0, 0.125], [0.0625, 0.0, -0.03125, 0.03125]]),  # (layers, heads)
        pad_id=0,
        pool_k=2,
        ig_steps=8,
        batch_size=4,
        trace_samples=6,
        trace_keep=0.5,
        seed=3,
        index=2,
    )


def test_every_answer_method_is_its_functions_summed_over_the_sources(example):
    x = example
    got = explain(x, method_names(ANSWER))
    assert set(got.scores) == set(method_names(ANSWER))  # by pass, in registry order within a pass
    rows = answer_head_attention(x.model, x.input_ids, x.answer_length)
    expected = {
        "attention_last": source_sums(rows[-1].mean(0), x.owner, 4),
        "attention_all": source_sums(rows.mean((0, 1)), x.owner, 4),
        "attention_pooled": top_k_pooled(rows.mean((0, 1)), x.owner, 4, 2),
        "learned_attention": learned_scores(source_features(rows, x.owner, 4), x.head_weights),
        "grad_input": source_sums(answer_gradient_x_input(x.model, x.input_ids, 2), x.owner, 4),
        "attnlrp": source_sums(answer_attnlrp(x.model, x.input_ids, 2).scores, x.owner, 4),
        "leave_one_out": x.full_score - x.leave_one_out.scores,  # mask i drops source i
        "arc_jsd": _direct_divergences(x.model, x.leave_one_out.masks),  # the definition, from plain forwards
        "permutation_shapley": _marginal_contributions(x.permutation),
        "surrogate": fit_surrogate(x.random.masks, x.random.scores, 2)[0],
        "hierarchical": _searched(x),
    }
    for method, scores in expected.items():
        np.testing.assert_allclose(got.scores[method], scores, rtol=0, atol=1e-10, err_msg=method)
    # AttnTrace against its loop on Hugging Face's dense attention matrices, whose softmax is float32 even in a
    # float64 model: each weight one float32 rounding (EPS32 relative) off, and so each mean of them
    np.testing.assert_allclose(got.scores["attntrace"], _attntrace_literally(x), rtol=2 * EPS32, atol=0)
    # IG: its completeness, Σ scores = F(x) − F(baseline) up to its δ, reported
    ig = got.scores["integrated_gradients"]
    assert got.explained["integrated_gradients"] - ig.sum() == pytest.approx(
        got.delta["integrated_gradients"], abs=1e-9
    )
    assert abs(got.delta["integrated_gradients"]) < 0.05 * abs(got.explained["integrated_gradients"]) + 1e-6
    # AttnLRP explains F itself: the answer's log-probability
    assert got.explained["attnlrp"] == pytest.approx(x.full_score, abs=1e-9)


def test_the_cost_of_each_method_counts_its_passes_and_the_ablations_it_read(example):
    got = explain(
        example,
        ["attention_all", "attention_pooled", "attntrace", "grad_input", "integrated_gradients", "leave_one_out"],
    )
    assert got.n_forwards["attention_all"] == got.n_forwards["attention_pooled"] == 1
    assert got.n_backwards["attention_all"] == 0 and got.n_forwards["attntrace"] == example.trace_samples
    assert (got.n_forwards["grad_input"], got.n_backwards["grad_input"]) == (1, 1)
    assert (got.n_forwards["integrated_gradients"], got.n_backwards["integrated_gradients"]) == (10, 8)
    got = explain(example, ["leave_one_out", "surrogate", "permutation_shapley"])
    assert (got.n_forwards["leave_one_out"], got.n_forwards["surrogate"]) == (4, 24)
    # three chains of five masks share the empty and the whole context: at most 3 · 3 + 2 distinct
    distinct = len({m.tobytes() for m in example.permutation.masks})
    assert got.n_forwards["permutation_shapley"] == distinct <= 11
    assert got.seconds["leave_one_out"] >= 0.5 and got.seconds["surrogate"] >= 2.0  # the cached ablations' seconds
    assert got.forward_seconds > 0 and all(v >= 0 for v in got.peak_bytes.values())
    with pytest.raises(ValueError, match=r"\['rollout'\] have no answer scorer"):
        explain(example, ["rollout"])


def test_removal_masks_share_the_forwards_of_methods_that_agree():
    scores = {
        "a": np.array([3.0, 1.0, 2.0, 0.0]),
        "b": np.array([9.0, 0.0, 5.0, 1.0]),
        "c": np.array([0.0, 1.0, 2.0, 3.0]),
    }
    masks, where = removal_masks(scores, (1, 2))
    assert masks.tolist() == [
        [False, True, True, True],
        [False, True, False, True],
        [True, True, True, False],
        [True, True, False, False],
    ]
    assert where == {"a": [0, 1], "b": [0, 1], "c": [2, 3]}


def test_judging_an_answer_is_its_drops_lds_and_planted_counts():
    scores = {"a": np.array([3.0, 1.0, 2.0, 0.0])}
    _, where = removal_masks(scores, (1, 2))
    removed = np.array([-2.0, -4.0])  # F without source 0; without sources 0 and 2
    heldout = np.array([[1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=bool)
    actual = heldout.astype(float) @ np.array([2.0, 0.0, 1.0, 0.5])
    planted = np.array([True, False, False, False])
    rows = judge_answer("e", scores, (1, 2), -1.0, removed, where, heldout, actual, planted)
    got = {metric: value for _, _, metric, value, _ in rows}
    assert got["top1_drop"] == pytest.approx(1.0) and got["top2_drop"] == pytest.approx(3.0)
    from scipy.stats import spearmanr  # noqa: PLC0415

    assert got["lds"] == pytest.approx(spearmanr(heldout.astype(float) @ scores["a"], actual).statistic)
    assert (got["precision_at_1"], got["recall_at_1"], got["precision_at_2"], got["recall_at_2"]) == (
        1.0,
        1.0,
        0.5,
        1.0,
    )
    no_truth = judge_answer("e", scores, (1,), -1.0, removed, {"a": [0]}, heldout, actual, np.zeros(4, dtype=bool))
    assert np.isnan([v for _, _, m, v, _ in no_truth if m.startswith(("precision", "recall"))]).all()
    names = [m.name for m in answer_metrics((1, 3))]
    assert names[:3] == ["top1_drop", "top3_drop", "lds"] and "peak_mib" in names


def test_the_precision_ceiling_is_the_best_any_ranking_reaches():
    """The ceiling row: with ``r`` planted sources, precision at ``k`` ≤ ``min(r, k) / k`` and recall at ``k`` ≤
    ``min(r, k) / r`` for every ranking, each reached by one: the best over every ranking of five sources."""
    planted = np.array([False, True, False, True, False])
    ks = (1, 2, 3, 5)
    rows = judge_answer("e", {}, ks, 0.0, np.zeros(0), {}, np.zeros((0, 5)), np.zeros(0), planted)
    ceiling = {metric: value for _, method, metric, value, _ in rows if method == CEILING}
    for k in ks:
        best = [precision_recall_at_k(np.array(order, dtype=float), planted, k) for order in permutations(range(5))]
        assert ceiling[f"precision_at_{k}"] == max(p for p, _ in best)
        assert ceiling[f"recall_at_{k}"] == max(r for _, r in best)
    none = np.zeros(5, dtype=bool)  # nothing planted: no ceiling (precision and recall are NaN)
    assert judge_answer("e", {}, ks, 0.0, np.zeros(0), {}, np.zeros((0, 5)), np.zeros(0), none) == []
