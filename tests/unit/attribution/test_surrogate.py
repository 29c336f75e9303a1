"""The ablation surrogate and the ablation judges (:mod:`attnlens.attribution.datamodels`) against the authors' code
(context-cite 0.0.4's masks, sequence scores and Lasso fit, and the whole method on a tiny causal language model,
committed by ``tests/reference/context_cite_reference.py``), against scipy, and on planted linear effects.

Bounds: the masks are integers (equal); the sequence scores are ContextCite's float32 sums of up to 9 token terms
against float64 here, so 1e-5 of their size (a float32 rounding, 6e-8, per operation, a few dozen operations);
the Lasso is the same scikit-learn call on the same float32 inputs, bit for bit on the machine that wrote the
reference — on another CPU its float32 dot products may round otherwise, and coordinate descent may then stop an
iteration earlier or later, inside its stopping rule (duality gap below ``tol = 1e-4`` of ``‖y‖²``): so 1e-4 of
the largest weight.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from attnlens.attribution.datamodels import (
    ablation_masks,
    answer_masks,
    answer_scores,
    fit_surrogate,
    heldout_masks,
    leave_one_out_masks,
    linear_datamodeling_score,
    precision_recall_at_k,
    top_k_masks,
)
from attnlens.generation.ablation import ablation_log_probs, answer_token_log_probs
from attnlens.tasks.contexts import PromptFormat, split_context
from tests.support.helpers import EPS32, ROOT
from tests.support.tiny_models import context_cite_model

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

REFERENCE = json.loads((ROOT / "tests" / "reference" / "context_cite" / "cases.json").read_text(encoding="utf-8"))
CASES = REFERENCE["cases"]


def _id(case: dict) -> str:
    return f"{case['n_sources']}-sources-{case['n_masks']}-masks-seed-{case['seed']}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_masks_are_context_cites(case):
    masks = ablation_masks(case["n_sources"], case["n_masks"], seed=case["seed"], keep=case["keep"])
    np.testing.assert_array_equal(masks, np.array(case["masks"], dtype=bool))


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_answer_scores_are_context_cites(case):
    """ContextCite's per-token values are logit-probabilities ``log p − log(1 − p)``; ``log p`` is their
    log-sigmoid. Both sequence scores agree with its aggregation."""
    logit_probs = np.array(case["token_logit_probs"], dtype=np.float64)
    log_p_tokens = -np.logaddexp(0.0, -logit_probs)  # log sigmoid, float64
    log_p, logit = answer_scores(log_p_tokens)
    np.testing.assert_allclose(log_p, case["log_prob"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logit, case["logit_prob"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_surrogate_is_context_cites(case):
    masks = np.array(case["masks"], dtype=bool)
    scores = np.array(case["logit_prob"], dtype=np.float32)  # ContextCite's float32 scores, as its solver gets them
    weights, bias = fit_surrogate(masks, scores, case["n_tokens"])
    reference = np.array(case["weights"])
    bound = 1e-4 * np.abs(reference).max()
    np.testing.assert_allclose(weights, reference, rtol=0, atol=bound)
    assert bias == pytest.approx(case["bias"], abs=bound * masks.shape[1])
    assert np.count_nonzero(reference) < masks.shape[1]  # the fit is sparse: the test would see a ridge


def test_the_surrogate_finds_the_planted_sources():
    """Scores linear in three planted sources, with noise: the surrogate ranks those three first, and its
    held-out LDS is near 1 where a random ranking's is near 0."""
    rng = np.random.default_rng(3)
    n_sources, truth = 20, np.zeros(20)
    truth[[2, 11, 17]] = [3.0, 2.0, 1.0]
    train, held_out = ablation_masks(n_sources, 64, seed=0), ablation_masks(n_sources, 64, seed=1000)

    def score(masks):
        return masks @ truth - 4.0 + rng.normal(0, 0.1, len(masks))

    weights, _ = fit_surrogate(train, score(train), n_tokens=4)
    assert list(np.argsort(-weights)[:3]) == [2, 11, 17]
    actual = score(held_out)
    assert linear_datamodeling_score(weights, held_out, actual) > 0.95
    assert abs(linear_datamodeling_score(rng.normal(size=n_sources), held_out, actual)) < 0.5


def test_heldout_masks_are_never_fitted_ones_nor_repeats():
    """Seven sources (128 masks): 64 fitted masks repeat some (ContextCite draws with replacement), and 32 held-out
    ones drawn after them must avoid every fitted mask; with 100 asked, only the masks left can be given."""
    fitted, heldout = answer_masks(0, 3, 7, 64, 32)
    assert np.array_equal(fitted, ablation_masks(7, 64, 3 * 100_003))  # the surrogate's masks are ContextCite's
    fitted_keys = {m.tobytes() for m in fitted}
    assert len(heldout) == 32 and len({m.tobytes() for m in heldout}) == 32
    assert not fitted_keys & {m.tobytes() for m in heldout}
    rest = heldout_masks(fitted, 100, seed=5)
    assert len(rest) == 128 - len(fitted_keys) and not fitted_keys & {m.tobytes() for m in rest}
    rare = heldout_masks(fitted[:4], 20, seed=5, keep=0.02, limit=50)  # keep 2 %: past 50 draws, drawn uniformly
    assert len({m.tobytes() for m in rare}) == 20 and not {m.tobytes() for m in fitted[:4]} & {
        m.tobytes() for m in rare
    }


def test_lds_is_spearmans_rho_of_predicted_and_actual_scores():
    """Against Spearman written out: Pearson's r of scipy's average ranks."""
    rng = np.random.default_rng(5)
    masks = ablation_masks(9, 40, seed=2)
    weights, actual = rng.normal(size=9), rng.normal(size=40)
    predicted = masks @ weights
    expected = np.corrcoef(rankdata(predicted), rankdata(actual))[0, 1]
    assert linear_datamodeling_score(weights, masks, actual) == pytest.approx(expected, abs=1e-12)
    # a ranking that predicts nothing scores 0, it does not drop out of the mean; a score that never moves has no
    # ranking to agree with
    assert linear_datamodeling_score(np.zeros(9), masks, actual) == 0.0
    assert np.isnan(linear_datamodeling_score(weights, masks, np.full(40, -2.0)))


def test_answer_scores_keep_their_digits_at_both_ends():
    """``log(1 − P)`` written out in exact arithmetic's terms: near ``P = 1`` (a sure answer) and for a long,
    unlikely one."""
    log_p, logit = answer_scores(np.array([[-1e-12, 0.0], [-30.0, -30.0]]))
    assert log_p.tolist() == [-1e-12, -60.0]
    assert logit[0] == pytest.approx(-1e-12 - np.log(1e-12), rel=1e-9)  # log(1 − P) = log(1e-12 − …)
    assert logit[1] == pytest.approx(-60.0 - np.log1p(-np.exp(-60.0)), rel=1e-15)
    assert answer_scores(np.zeros((1, 3)))[1][0] == np.inf
    with pytest.raises(ValueError, match="log-probabilities"):
        answer_scores(np.array([[0.5]]))


def test_precision_and_recall_at_k_are_counts_of_the_planted_sources_ranked_first():
    scores = np.array([0.1, 3.0, 3.0, -1.0, 2.0])
    relevant = np.array([False, False, True, False, True])
    assert precision_recall_at_k(scores, relevant, 1) == (0.0, 0.0)  # the tie goes to source 1, not planted
    assert precision_recall_at_k(scores, relevant, 3) == (2 / 3, 1.0)
    assert precision_recall_at_k(scores, relevant, 9) == (2 / 5, 1.0)  # k past the sources: all of them
    precision, recall = precision_recall_at_k(scores, np.zeros(5, dtype=bool), 2)
    assert precision == 0.0 and np.isnan(recall)
    with pytest.raises(ValueError, match="a flag per source"):
        precision_recall_at_k(scores, relevant[:3], 2)


def test_top_k_and_leave_one_out_masks():
    masks = top_k_masks(np.array([0.1, 3.0, 3.0, -1.0, 2.0]), ks=(1, 3, 9))
    assert masks.astype(int).tolist() == [[1, 0, 1, 1, 1], [1, 0, 0, 1, 0], [0, 0, 0, 0, 0]]  # ties: earlier first
    assert leave_one_out_masks(3).astype(int).tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    with pytest.raises(ValueError, match="NaN"):
        top_k_masks(np.array([0.0, np.nan]), ks=(1,))
    with pytest.raises(ValueError, match="probability"):
        ablation_masks(3, 2, seed=0, keep=1.0)


def test_the_whole_method_on_a_model_is_context_cites():
    """ContextCite end to end on a tiny causal language model (``model.json``: its sources, ablation masks, per-token
    scores and attributions): the context cut into its sources, each ablation's prompt rebuilt from the kept ones
    inside the prompt and chat templates and scored (:func:`ablation_log_probs`, ``removal="delete"``, as
    ContextCite removes a source), and the surrogate fitted (:func:`fit_surrogate`).

    Bounds: both score the same float32 model, each with its own kernels (ContextCite's reference was made on
    another machine, with transformers 4.57.6), so each side is a float32 rounding of the model's float64 values,
    computed here with its weights in float64: each side within :func:`_float32_forward_bound` of them, the two
    within twice it. The surrogate's weights move with their scores' rounding: 1e-4 of the largest weight
    (measured: 6.6e-7 of it where the reference was made, 1.4e-6 on AVX-512, 2.0e-6 under the portable kernels)."""
    record, tokenizer, model = context_cite_model()
    masks = np.array(record["masks"], dtype=bool)
    np.testing.assert_array_equal(masks, ablation_masks(len(record["sources"]), len(masks), seed=0))
    context = " ".join(record["sources"])
    sources = split_context(context)
    assert [source.text for source in sources] == record["sources"]
    prompt = PromptFormat().build(tokenizer, context, record["query"])
    assert tokenizer(prompt.text, add_special_tokens=False)["input_ids"] == record["prompt_ids"]
    answer = record["answer_ids"]
    log_p = ablation_log_probs(model, tokenizer, context, sources, record["query"], answer, masks, removal="delete")
    logit_probs = _logit_probs(log_p)  # ContextCite's per-token value, log p − log(1 − p)
    model64 = copy.deepcopy(model).double()
    bound = _float32_forward_bound(model64, record["prompt_ids"] + answer)
    exact = _logit_probs(ablation_log_probs(model64, tokenizer, context, sources, record["query"], answer, masks))
    np.testing.assert_allclose(logit_probs, exact, rtol=0, atol=bound)  # this machine's float32 rounding
    np.testing.assert_allclose(record["token_logit_probs"], exact, rtol=0, atol=bound)  # the reference's
    np.testing.assert_allclose(logit_probs, record["token_logit_probs"], rtol=0, atol=2 * bound)
    _, scores = answer_scores(log_p)
    weights, _ = fit_surrogate(masks, scores.astype(np.float32), len(answer))
    reference = np.array(record["weights"])
    assert np.count_nonzero(reference) >= 4  # the context matters to this model's answer
    np.testing.assert_allclose(weights, reference, rtol=0, atol=1e-4 * np.abs(reference).max())


def _logit_probs(log_p: np.ndarray) -> np.ndarray:
    return log_p - np.log1p(-np.exp(log_p))


def _float32_forward_bound(model64, ids: list[int]) -> float:
    """How far a float32 forward of a model on ``ids`` may lie from its float64 values (``model64``: the model in
    float64), at any summation order: 8 float32 roundings (``EPS32`` relative each) of the largest value its sums take
    (the largest hidden state of the float64 forward: this model's residual stream reaches 130, its initial weights
    being drawn at 0.5).

    The per-token log-probabilities carry the residual stream's rounding through the final norm and the output
    layer (2 layers, sums of at most 64 terms); measured against the float64 forward: 0.8 such roundings for
    context-cite's reference, 1.2 on AVX-512 and 2.3 under the portable kernels (tests/README.md,
    "CPU kernels")."""
    with torch.no_grad():
        states = model64(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return 8 * EPS32 * max(float(h.abs().max()) for h in states)


def test_a_masked_source_is_its_tokens_out_of_attention():
    """``removal="mask"``: one tokenization of the full prompt, each ablation's removed sources' tokens attended by
    no token (their positions kept), against keep flags built here from the offsets by hand; and with every source
    kept, the same scores as the deletion of none (each a float32 forward with sums in its own order: within
    twice :func:`_float32_forward_bound`)."""
    record, tokenizer, model = context_cite_model()
    context, query, answer = " ".join(record["sources"]), record["query"], record["answer_ids"]
    sources = split_context(context)
    masks = ablation_masks(len(sources), 6, seed=5)
    got = ablation_log_probs(model, tokenizer, context, sources, query, answer, masks, removal="mask")
    prompt = PromptFormat().build(tokenizer, context, query)
    encoded = tokenizer(prompt.text, add_special_tokens=False, return_offsets_mapping=True)
    # the same float32 model on one machine, each ablation in its own forward against a batch read from the shared
    # prefix: sums in another order, each side within the float32 bound of the float64 values, so twice it apart
    bound = 2 * _float32_forward_bound(copy.deepcopy(model).double(), encoded["input_ids"] + answer)
    for keep, row in zip(masks, got, strict=True):
        flags = []
        for a, _ in encoded["offset_mapping"]:
            inside = [k for k, s in enumerate(sources) if s.start <= a - prompt.context_start < s.end]
            flags.append(int(not inside or keep[inside[0]]))
        (expected,) = answer_token_log_probs(
            model, [encoded["input_ids"] + answer], [len(answer)], [flags + [1] * len(answer)]
        )
        np.testing.assert_allclose(row, expected, rtol=0, atol=bound)
    everything = np.ones((1, len(sources)), dtype=bool)
    kept = ablation_log_probs(model, tokenizer, context, sources, query, answer, everything, removal="mask")
    deleted_none = ablation_log_probs(model, tokenizer, context, sources, query, answer, everything)
    np.testing.assert_allclose(kept, deleted_none, rtol=0, atol=bound)
    assert np.abs(got - kept).max() > 100 * bound  # what the masks take out moves the scores far past the bound
    with pytest.raises(ValueError, match="removal"):
        ablation_log_probs(model, tokenizer, context, sources, query, answer, everything, removal="drop")
