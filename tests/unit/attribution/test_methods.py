"""The explanation-method registry (:mod:`attnlens.attribution.methods`): every card has its computation, the
config, the docs and the readers list what is registered, a shared pass runs once per example, and a new method
is one card and one scorer — a method registered here, in the test, is computed, validated, labelled and ranked
without a line changed anywhere else.

The scores themselves are checked against independent references in ``tests/unit/attribution/test_explanations.py``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlens.attribution import explanations
from attnlens.attribution.answers import ANSWER_PASSES, SOURCE_SCORERS, SourceScored, source_scorer
from attnlens.attribution.explanations import PASS_RUNNERS, SCORERS, Scored, driver, explain_example, scorer
from attnlens.attribution.ig import freeze, prepare_inputs
from attnlens.attribution.methods import (
    ANSWER,
    ATTENTION_RANKINGS,
    COST_CLASSES,
    DOCUMENT,
    PASSES,
    REGISTRY,
    Method,
    get_method,
    label,
    method_names,
    ranking_source,
    register,
    signed,
)
from attnlens.errors import InputError
from attnlens.pipeline.config import load_schema, validate_config
from attnlens.registry import UnknownName
from tests.support.helpers import ROOT
from tests.support.tiny_models import tiny_longformer


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


@pytest.fixture()
def uniform_method():
    """A method of the test's own: every non-padded token scores 1 / n (closed form), read from the attention pass."""
    card = register(Method("uniform", "uniform control (test)", signed=False, needs="attention", cost="forward"))

    @scorer("uniform")
    def _uniform(x, shared):
        bands, _hidden = shared
        assert len(bands) == 2  # it was given the shared pass's output
        return Scored(np.full(x.n, 1.0 / x.n))

    yield card
    REGISTRY.unregister("uniform")
    SCORERS.unregister("uniform")


def test_every_card_has_a_scorer_and_a_pass():
    assert set(SCORERS) == set(method_names(DOCUMENT))
    assert set(SOURCE_SCORERS) == set(method_names(ANSWER))
    assert set(SCORERS) | set(SOURCE_SCORERS) == set(REGISTRY)  # every card explains something
    assert set(PASS_RUNNERS) == set(PASSES)
    assert {get_method(m).needs for m in method_names(ANSWER)} == set(ANSWER_PASSES)
    for card in REGISTRY.values():
        assert card.needs in PASSES and card.cost in COST_CLASSES, card
    assert method_names()[:2] == ("attention_last", "attention_all")  # leaderboard order: registration order
    assert method_names(ANSWER)[:2] == ("attention_last", "attention_all")


def test_an_answer_method_is_one_card_and_one_source_scorer():
    card = register(Method("first", "first source (test)", signed=False, needs="own", cost="forward", scopes=(ANSWER,)))
    try:

        @source_scorer("first")
        def _first(x, shared):
            scores = np.zeros(x.n_sources)
            scores[0] = 1.0
            return SourceScored(scores)

        assert "first" in method_names(ANSWER) and "first" not in method_names(DOCUMENT)
        cfg = validate_config(
            {
                "data": {"task": "generation"},
                "studies": ["generation"],
                "model": {"source": "from_config", "architecture": "llama"},
            }
        )
        assert "first" in cfg["generation"]["methods"] and "first" not in cfg["explanations"]["methods"]
        assert card.scopes == (ANSWER,)
    finally:
        REGISTRY.unregister("first")
        SOURCE_SCORERS.unregister("first")
    with pytest.raises(ValueError, match="does not explain a generated answer"):
        source_scorer("rollout")
    with pytest.raises(ValueError, match=r"scopes \('essay',\)"):
        Method("x", "x", signed=False, needs="own", cost="forward", scopes=("essay",))


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
    with pytest.raises(UnknownName, match=unknown):
        scorer("lime")


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


def test_a_shared_pass_runs_once_for_all_its_methods(toy, monkeypatch):
    model, inputs, _ = toy
    calls = []
    counted = {name: lambda x, run=run, name=name: calls.append(name) or run(x) for name, run in PASS_RUNNERS.items()}
    monkeypatch.setattr(driver, "PASS_RUNNERS", counted)
    got = explain_example(model, inputs, 1, ["rollout", "saliency", "attention_all", "grad_input", "value_norm"])
    assert calls == ["attention", "embedding_gradient"]  # in PASSES order, each once
    assert list(got.scores) == ["attention_all", "value_norm", "rollout", "saliency", "grad_input"]
    assert got.n_forwards == dict.fromkeys(got.scores, 1)


def test_a_new_method_is_one_card_and_one_scorer(toy, uniform_method):
    model, inputs, ids = toy
    assert method_names()[-1] == "uniform" and label("uniform") == "uniform control (test)"
    got = explain_example(model, inputs, 1, ["attention_all", "uniform"])
    np.testing.assert_array_equal(got.scores["uniform"], np.full(len(ids), 1 / len(ids)))
    assert got.seconds["uniform"] > 0 and "uniform" not in got.explained
    # the config accepts it, by default too, and faithfulness ranks it from the explain shards
    cfg = validate_config({"faithfulness": {"rankings": ["ig", "uniform"]}})
    assert "uniform" in cfg["explanations"]["methods"] and ranking_source("uniform") == "explain"
    # the rows of an explain shard, as for any method
    rows = explanations.explanation_rows("doc", ids, 1, got, ["attention_all", "uniform"])
    assert [r["method"] for r in rows] == ["attention_all", "uniform"] and np.isnan(rows[1]["explained"])


def test_a_card_without_a_scorer_is_named(toy):
    model, inputs, _ = toy
    register(Method("orphan", "no computation", signed=False, needs="own", cost="forward"))
    try:
        with pytest.raises(ValueError, match=r"\['orphan'\] are registered without a scorer"):
            explain_example(model, inputs, 1, ["orphan"])
    finally:
        REGISTRY.unregister("orphan")


def test_conserving_methods_keep_what_they_explain(toy):
    model, inputs, _ = toy
    got = explain_example(model, inputs, 1, ["attnlrp", "saliency"])
    conserving = {name for name, card in REGISTRY.items() if card.conserves}
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
    namespace = {**vars(explanations), "register": register, "Method": Method}
    exec(compile(block, "docs/explanations.md", "exec"), namespace)
    try:
        got = explain_example(model, inputs, 1, ["grad_norm"]).scores["grad_norm"]
    finally:
        REGISTRY.unregister("grad_norm")
        SCORERS.unregister("grad_norm")
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
