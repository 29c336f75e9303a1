"""The model-randomisation sanity check: what each level of the cascade draws anew, and the agreement it measures."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from attnlens.attribution.engine import explain_document
from attnlens.attribution.ig import freeze, prepare_inputs
from attnlens.attribution.sanity_check import layers_of, levels, position_agreement, rank_agreement, sanity_rows
from attnlens.models import architecture
from attnlens.models.randomisation import head_modules, randomise_top
from tests.support.tiny_models import tiny_decoder


def randomised(model, level: str, seed: int):
    return randomise_top(copy.deepcopy(model), layers_of(level), seed)


def _state(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _changed(before: dict, module) -> set[str]:
    return {k for k, v in module.state_dict().items() if not torch.equal(v, before[k])}


def test_the_cascade_draws_the_head_then_layers_from_the_top(tiny_classifier):
    model, _ = tiny_classifier
    arch = architecture(model)
    assert levels(len(arch.layers(model))) == ["head", "top1", "top2"]
    state = _state(model)
    for level, layers in (("head", []), ("top1", [1]), ("top2", [0, 1])):
        copy = randomised(model, level, seed=3)
        changed = _changed(state, copy)
        head = {k for k in state if k.startswith("classifier.")}
        assert head and head <= changed, level  # the head is drawn anew at every level
        for i, layer in enumerate(arch.layers(copy)):
            moved = _changed({k: v for k, v in _state(arch.layers(model)[i]).items()}, layer)
            assert bool(moved) == (i in layers), (level, i)
        embeddings = {k for k in state if ".embeddings." in k}
        assert not (embeddings & changed)  # the input layer is kept
        assert _changed(state, model) == set()  # the trained model is untouched
    again = randomised(model, "top1", seed=3)
    assert _changed(_state(randomised(model, "top1", seed=3)), again) == set()  # seeded
    assert _changed(_state(randomised(model, "top1", seed=4)), again)
    assert [type(m).__name__ for m in head_modules(model)] == ["LongformerClassificationHead"]
    with pytest.raises(ValueError, match="the model has 2"):
        randomised(model, "top3", seed=0)


def test_rank_agreement_is_spearman_of_magnitudes_over_content_tokens():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=12), rng.normal(size=12)
    content = np.ones(12, dtype=bool)
    content[[0, 11]] = False
    expected = spearmanr(np.abs(a[1:11]), np.abs(b[1:11])).statistic
    assert rank_agreement(a, b, content) == pytest.approx(expected, abs=1e-15)
    assert rank_agreement(a, -a, content) == pytest.approx(1.0)  # magnitudes: the sign does not count
    assert math.isnan(rank_agreement(a, np.ones(12), content))
    # against the place of each content token: scipy's ρ of |scores| with 1 … 10
    expected = spearmanr(np.arange(1, 11), np.abs(b[1:11])).statistic
    assert position_agreement(b, content) == pytest.approx(expected, abs=1e-15)
    assert position_agreement(np.arange(12.0)[::-1], content) == pytest.approx(-1.0)


def test_a_language_model_head_tied_to_the_kept_embeddings_is_not_drawn_anew():
    """A decoder's cascade starts with its language-model head; a head tied to the input embeddings is the
    embeddings, which the check keeps, so it is left out and the cascade starts at the top layer."""
    untied = tiny_decoder(head="causal_lm")
    assert [type(m).__name__ for m in head_modules(untied)] == ["Linear"] and levels(2, head=True)[0] == "head"
    state = _state(untied)
    changed = _changed(state, randomise_top(copy.deepcopy(untied), 0, seed=1))
    assert changed == {"lm_head.weight"}
    tied = tiny_decoder(head="causal_lm")
    tied.lm_head.weight = tied.model.embed_tokens.weight
    assert head_modules(tied) == [] and levels(2, head=bool(head_modules(tied))) == ["top1", "top2"]
    with pytest.raises(ValueError, match="no parameter of the model could be drawn anew"):
        randomise_top(copy.deepcopy(tied), 0, seed=1)
    before = _state(tied)
    moved = _changed(before, randomise_top(copy.deepcopy(tied), 1, seed=1))
    assert moved and all(k.startswith("model.layers.1.") for k in moved)  # the embeddings (and the head) are kept


def test_randomising_the_model_moves_gradient_explanations_but_not_rank_of_an_input_echo(tiny_classifier):
    """Saliency depends on the weights, so it moves; the rows measure each method's ρ at each level."""
    model, tokenizer = tiny_classifier
    freeze(model)
    ids = tokenizer("The method works. It is fast! Is it faithful? Yes, it is, and it is also cheap to run.")[
        "input_ids"
    ]
    special = np.array([i in tokenizer.all_special_ids for i in ids])
    methods = ["saliency", "attention_last"]

    def scores(net):
        return explain_document(net, prepare_inputs(net, tokenizer, ids), 1, methods).scores

    trained = scores(model)
    assert rank_agreement(trained["saliency"], scores(model)["saliency"], ~special) == pytest.approx(1.0)
    by_level = {lv: scores(freeze(randomised(model, lv, seed=1))) for lv in ("head", "top2")}
    rows = sanity_rows("e1", trained, by_level, ~special, methods)
    assert [(r["level"], r["method"], r["layers"]) for r in rows] == [
        ("head", "saliency", 0),
        ("head", "attention_last", 0),
        ("top2", "saliency", 2),
        ("top2", "attention_last", 2),
    ]
    rho = {(r["level"], r["method"]): r["spearman"] for r in rows}
    # the head alone leaves attention as it was: the same forward up to the head
    assert rho[("head", "attention_last")] == pytest.approx(1.0)
    assert rho[("top2", "saliency")] < 0.9
