"""The explanation methods (:mod:`attnlens.attribution.methods`): every card has its computation for each scope it
explains, the config, the docs and the readers list what is registered, a shared pass runs once per example, and a
new method is one file — ``tests/support/toy_method.py``, registered here, is computed for a document and for an
answer, validated, labelled, ranked and judged on both leaderboards without a line changed anywhere else.

The scores themselves are checked against independent references in ``tests/unit/attribution/test_explanations.py``
and ``tests/unit/attribution/test_answer_example.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.attribution import explanations
from attnlens.attribution.answer_example import AnswerExample
from attnlens.attribution.datamodels import ablation_masks, answer_scores
from attnlens.attribution.engine import explain, explain_document, explanation_rows
from attnlens.attribution.ig import freeze, prepare_inputs
from attnlens.attribution.leaderboard import agreement_metrics, agreement_rows, summarise
from attnlens.attribution.methods import (
    ANSWER,
    ATTENTION_RANKINGS,
    COST_CLASSES,
    DOCUMENT,
    PASSES,
    REGISTRY,
    SCOPES,
    Method,
    get_method,
    label,
    method_names,
    ranking_source,
    register,
    signed,
)
from attnlens.errors import InputError
from attnlens.generation.ablation import answer_token_log_probs
from attnlens.generation.answer_leaderboard import answer_metrics, judge_answer, removal_masks
from attnlens.pipeline.config import load_schema, validate_config
from attnlens.registry import UnknownName
from tests.support import toy_method
from tests.support.helpers import ROOT
from tests.support.tiny_models import tiny_decoder, tiny_longformer


class _Tokenizer:
    pad_token_id, cls_token_id, sep_token_id = 1, 0, 2

    def __call__(self, text, **kw):
        return {"input_ids": [0, 2]}


@pytest.fixture(scope="module")
def toy():
    model = freeze(
        tiny_longformer(
            vocab_size=40,
            hidden=16,
            layers=2,
            heads=2,
            intermediate=32,
            max_positions=80,
            window=4,
            num_labels=2,
            seed=5,
            double=True,
        )
    )
    ids = [0, *range(5, 20), 2]
    return model, prepare_inputs(model, _Tokenizer(), ids), ids


PROMPT = [5, 9, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 6]
OWNER = [-1, 0, 0, 0, 1, 1, 2, 2, 2, 3, 3, -1, -1]  # four sources, the template's tokens −1
ANSWER_IDS = [47, 53]


@pytest.fixture(scope="module")
def answer():
    """A tiny decoder's answer of two tokens after a prompt of four sources, as the answer scope's scorers see it."""
    model = tiny_decoder("llama", head="causal_lm", seed=4)
    for p in model.parameters():
        p.requires_grad_(False)
    (full,) = answer_token_log_probs(model, [PROMPT + ANSWER_IDS], [len(ANSWER_IDS)])
    return AnswerExample(
        model=model,
        input_ids=torch.tensor([PROMPT + ANSWER_IDS]),
        answer_length=len(ANSWER_IDS),
        owner=np.array(OWNER + [-1] * len(ANSWER_IDS)),
        n_sources=4,
        full_score=float(full.sum()),
        n_answer_tokens=len(ANSWER_IDS),
    )


def _answer_scores(model, masks: np.ndarray) -> np.ndarray:
    """The answer's log-probability with each mask's removed sources' tokens out of attention."""
    keep = [[int(o < 0 or m[o]) for o in OWNER] + [1] * len(ANSWER_IDS) for m in masks]
    lp = answer_token_log_probs(model, [PROMPT + ANSWER_IDS] * len(masks), [len(ANSWER_IDS)] * len(masks), keep)
    return answer_scores(np.stack(lp))[0]


@pytest.fixture()
def position_method():
    """``tests/support/toy_method.py``'s method, registered for the test."""
    card = register(toy_method.METHOD)
    yield card
    REGISTRY.unregister(card.name)


def test_every_card_has_a_scorer_and_its_pass_a_runner_for_each_scope():
    for card in REGISTRY.values():
        assert card.scopes, f"{card.name} explains nothing"
        assert card.needs in PASSES and card.cost in COST_CLASSES, card
        for scope in card.scopes:
            assert scope in PASSES[card.needs].runners, (card.name, scope)
        assert set(card.batch_scorers) <= set(card.scorers)  # a batch of one is the scorer's
    assert {scope for card in REGISTRY.values() for scope in card.scopes} == set(SCOPES)
    assert method_names()[:2] == ("attention_last", "attention_all")  # leaderboard order: registration order
    assert method_names(ANSWER)[:2] == ("attention_last", "attention_all")


def test_a_new_method_for_both_scopes_is_one_file(toy, answer, position_method):
    """The toy method's one file reaches the schema's two method lists, a document's explanation and its leaderboard,
    and an answer's explanation and its judges, with nothing else changed."""
    model, inputs, ids = toy
    assert position_method.scopes == SCOPES and label("position") == "token position (test)"
    assert method_names()[-1] == method_names(ANSWER)[-1] == "position"
    props = load_schema()["properties"]
    assert "position" in props["explanations"]["properties"]["methods"]["default"]
    assert "position" in props["generation"]["properties"]["methods"]["default"]
    assert "position" in props["faithfulness"]["properties"]["rankings"]["items"]["enum"]
    assert ranking_source("position") == "explain"

    # a document: explained beside a shipped method, its rows and its leaderboard row
    got = explain_document(model, inputs, 1, ["attention_all", "position"])
    # exact: the scorer returns this very float64 expression, no model arithmetic in between (any CPU)
    np.testing.assert_array_equal(got.scores["position"], np.arange(len(ids)) / len(ids))
    assert got.n_forwards["position"] == 1 and got.seconds["position"] > 0 and "position" not in got.explained
    rows = explanation_rows("doc", ids, 1, got, ["attention_all", "position"])
    assert [r["method"] for r in rows] == ["attention_all", "position"] and np.isnan(rows[1]["explained"])
    ig = np.linspace(0.0, 1.0, len(ids))
    special = np.zeros(len(ids), dtype=bool)
    per_example = [
        row
        for eid in ("a", "b", "c")
        for row in agreement_rows(
            eid, ig, got.scores, special, n_permutations=4, top_fraction=0.2, rbo_p=(0.9,), seed=0
        )
    ]
    frame = pd_frame(per_example)
    board = summarise(frame, agreement_metrics(0.2, (0.9,)), "attention_all", seed=0, n_boot=20)
    spearman = board[(board["method"] == "position") & (board["metric"] == "spearman")]
    assert spearman["mean"].item() == pytest.approx(1.0)  # its ranking is IG's here: position against a ramp

    # an answer: explained beside a shipped method, judged by its top-k removals and held-out ablations
    got = explain(answer, ["attention_all", "position"])
    # exact, as above: the answer scorer's own float64 expression
    np.testing.assert_array_equal(got.scores["position"], np.arange(4) / 4)
    assert (got.n_forwards["position"], got.n_backwards["position"]) == (1, 0)
    masks, where = removal_masks(got.scores, (1, 2))
    heldout = ablation_masks(4, 8, seed=3)
    judged = judge_answer(
        "q",
        got.scores,
        (1, 2),
        answer.full_score,
        _answer_scores(answer.model, masks),
        where,
        heldout,
        _answer_scores(answer.model, heldout),
        np.array([False, False, False, True]),
    )
    board = summarise(pd_frame(judged), answer_metrics((1, 2)), "attention_all", seed=0, n_boot=20)
    mine = board[board["method"] == "position"].set_index("metric")["mean"]
    assert mine["precision_at_1"] == 1.0  # the last source ranks first, and it is the planted one
    assert mine["top1_drop"] == pytest.approx(
        answer.full_score - _answer_scores(answer.model, masks[[where["position"][0]]])[0]
    )


def pd_frame(rows: list[tuple]) -> pd.DataFrame:
    """Per-example leaderboard rows as :func:`~attnlens.attribution.leaderboard.summarise` reads them."""
    return pd.DataFrame(rows, columns=["example_id", "method", "metric", "value", "chance"])


def test_cards_check_their_fields():
    with pytest.raises(ValueError, match=r"needs 'nothing', expected one of \['attention'"):
        Method("x", "x", signed=False, needs="nothing", cost="forward")
    with pytest.raises(ValueError, match=r"cost 'free', expected one of"):
        Method("x", "x", signed=False, needs="own", cost="free")
    with pytest.raises(ValueError, match="already registered"):
        register(Method("saliency", "again", signed=False, needs="own", cost="forward"))
    with pytest.raises(ValueError, match="names the reference or the control"):
        register(Method("ig", "IG", signed=True, needs="own", cost="forward"))
    unknown = (
        r"^config: explanations.methods: expected one of the explanation methods \[.attention_last., .*got .lime.$"
    )
    with pytest.raises(UnknownName, match=unknown):
        get_method("lime")
    with pytest.raises(ValueError, match=r"scope 'essay': expected one of \['document', 'answer'\]"):
        Method("x", "x", signed=False, needs="own", cost="forward").explains("essay")
    with pytest.raises(ValueError, match="method 'saliency' has a document computation already"):
        get_method("saliency").explains(DOCUMENT)(lambda x, shared: None)
    with pytest.raises(ValueError, match="pass 'own' has a document computation already"):
        PASSES["own"].runs_for(DOCUMENT)(lambda x: None)


def test_the_schema_lists_what_is_registered():
    props = load_schema()["properties"]
    methods = props["explanations"]["properties"]["methods"]
    assert methods["items"]["enum"] == methods["default"] == list(method_names())
    rankings = props["faithfulness"]["properties"]["rankings"]
    assert rankings["items"]["enum"][0] == "ig" and rankings["items"]["enum"][-1] == "random"
    assert set(rankings["items"]["enum"]) == {"ig", "random", *ATTENTION_RANKINGS, *method_names()}
    assert rankings["default"] == ["ig", *method_names(), "random"]
    with pytest.raises(InputError, match=r"explanations\.methods.*lime"):
        validate_config({"explanations": {"methods": ["lime"]}})


def test_labels_signs_and_ranking_sources():
    assert label("ig") == "integrated gradients (reference)" and signed("ig") and not signed("random")
    assert label("attnlrp") == "AttnLRP (Achtibat et al. 2024)" and signed("occlusion") and not signed("rollout")
    assert label("not_a_method") == "not_a_method"
    assert [ranking_source(r) for r in ("ig", "attention_lower", "attention_all", "saliency", "random")] == [
        "ig",
        "attention",
        "attention",
        "explain",
        "random",
    ]
    with pytest.raises(UnknownName, match="expected one of the explanation methods"):
        ranking_source("lime")


def test_the_docs_table_names_every_method():
    text = (ROOT / "docs" / "explanations.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (`[^|]+`) \|", text, flags=re.M)
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert set(REGISTRY) <= documented, set(REGISTRY) - documented


def test_a_shared_pass_runs_once_for_all_its_methods(toy, answer, monkeypatch):
    model, inputs, _ = toy
    calls = []
    for name, shared_pass in PASSES.items():
        for scope, run in list(shared_pass.runners.items()):
            counted = lambda x, run=run, name=name, scope=scope: calls.append((scope, name)) or run(x)  # noqa: E731
            monkeypatch.setitem(shared_pass.runners, scope, counted)
    got = explain_document(model, inputs, 1, ["rollout", "saliency", "attention_all", "grad_input", "value_norm"])
    assert calls == [(DOCUMENT, "attention"), (DOCUMENT, "embedding_gradient")]  # in PASSES order, each once
    assert list(got.scores) == ["attention_all", "value_norm", "rollout", "saliency", "grad_input"]
    assert got.n_forwards == dict.fromkeys(got.scores, 1)
    calls.clear()
    got = explain(answer, ["grad_input", "attention_pooled", "attention_last", "attention_all"])
    assert calls == [(ANSWER, "attention"), (ANSWER, "embedding_gradient")]
    assert list(got.scores) == ["attention_last", "attention_all", "attention_pooled", "grad_input"]


def test_a_card_without_a_scorer_for_the_scope_is_named(toy, answer):
    model, inputs, _ = toy
    register(Method("orphan", "no computation", signed=False, needs="own", cost="forward"))
    try:
        with pytest.raises(ValueError, match=r"\['orphan'\] have no document scorer"):
            explain_document(model, inputs, 1, ["orphan"])
        assert "orphan" not in method_names(DOCUMENT) and "orphan" not in method_names(ANSWER)
    finally:
        REGISTRY.unregister("orphan")
    with pytest.raises(ValueError, match=r"\['rollout'\] have no answer scorer"):
        explain(answer, ["rollout"])


def test_conserving_methods_keep_what_they_explain(toy):
    model, inputs, _ = toy
    got = explain_document(model, inputs, 1, ["attnlrp", "saliency"])
    conserving = {name for name, card in REGISTRY.items() if DOCUMENT in card.conserves}
    assert REGISTRY["attnlrp"].conserves[ANSWER].startswith("answer log-probability")  # a sum of log-softmaxes
    assert set(got.explained) == conserving & set(got.scores) == {"attnlrp"}
    logit = model(**{"input_ids": inputs.input_ids, **inputs.forward_kwargs()}).logits[0, 1]
    # what AttnLRP explains is the logit of the same forward, a float64 model: exact up to float64 rounding
    assert got.explained["attnlrp"] == pytest.approx(float(logit), rel=1e-12)


def test_the_docs_worked_example_runs_and_matches_autograd(toy):
    """docs/explanations.md's "Adding a method" block, executed as written: its gradient norm equals the norm of
    ``∂F/∂e`` from a plain ``torch.autograd.grad`` (same float64 forward: rounding only, ``rel=1e-12``)."""
    model, inputs, ids = toy
    text = (ROOT / "docs" / "explanations.md").read_text(encoding="utf-8")
    block = text.split("## Adding a method", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "docs/explanations.md", "exec"), namespace)
    try:
        got = explain_document(model, inputs, 1, ["grad_norm"]).scores["grad_norm"]
    finally:
        REGISTRY.unregister("grad_norm")
    args = {"input_ids": inputs.input_ids, **inputs.forward_kwargs()}
    forward = explanations.EmbeddingForward(model, model.longformer.embeddings, args)
    seen = []
    handle = forward.layer.register_forward_hook(lambda module, a, out: seen.append(out.detach()))
    with torch.no_grad():
        forward.from_ids(inputs.input_ids)  # the embedding output as the model computes it (padded inside)
    handle.remove()
    embeddings = seen[0].requires_grad_()
    (grad,) = torch.autograd.grad(forward(embeddings)[0, 1], embeddings)
    np.testing.assert_allclose(got, grad[0].norm(dim=-1).numpy()[: len(ids)], rtol=1e-12)
