"""AttnLRP against its authors' code: lxt 2.1's relevances for small seeded random-weight decoders of each family it
covers (Llama, Qwen 3, Gemma 3), written by ``tests/reference/lxt_reference.py`` in an environment of its own
(transformers 4.52, the version lxt was tested with; ``tests/reference/build_lxt_env.sh``) and committed under
``tests/reference/lxt``, against :func:`attnlens.attribution.lrp.attnlrp` on the same weights and tokens; and
the same families as causal language models explaining a generated answer's log-probability
(:func:`attnlens.attribution.source_scores.answer_attnlrp`).

Both explain the classifier's logit by ``Σ_d e · ∂̃f/∂e`` at the embedding output under the same rules, computed
differently: lxt rewrites the RMSNorm and MLP forwards and divides the gradients of the queries, keys and values
where they enter its attention function; attnlens leaves the forward alone and hooks the modules the model seam
names (the query, key and value projections' outputs, every RMSNorm, the activations, the down projections' inputs).
Float32 both: the relevances agree to float32 noise. Each rule left out breaks the agreement by orders of magnitude.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import attnlens.attribution.lrp as attnlrp_module
from attnlens.attribution.ig import Inputs, freeze
from attnlens.attribution.lrp import attnlrp
from attnlens.attribution.source_scores import answer_attnlrp, answer_gradient_x_input
from attnlens.models import architecture, draw_decoder
from tests.support.helpers import ROOT

REFERENCE = ROOT / "tests" / "reference" / "lxt"
FAMILIES = ("llama", "qwen3", "gemma3")
#: Float32 both ways, two layers of sums and products: 1e-5 of the largest relevance (measured: at most 1.6e-7).
TOLERANCE = 1e-5


def _model_and_reference(family: str):
    record = json.loads((REFERENCE / f"{family}.json").read_text(encoding="utf-8"))
    model = draw_decoder(family, 0, **record["settings"], num_labels=record["num_labels"], attn_implementation="eager")
    missing, unexpected = model.load_state_dict(load_file(str(REFERENCE / f"{family}.safetensors")), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    freeze(model)
    return model.eval(), record


def _relevance(model, record) -> tuple[np.ndarray, float]:
    ids = torch.tensor(record["input_ids"])
    arch = architecture(model)
    inputs = Inputs(ids, ids, torch.ones_like(ids), arch.position_ids(model.config, ids.shape[1]), {})
    out = attnlrp(model, inputs, record["target"])
    return out.scores, out.explained


def _error(scores: np.ndarray, record) -> float:
    reference = np.asarray(record["relevance"])
    return float(np.abs(scores - reference).max() / np.abs(reference).max())


@pytest.mark.parametrize("family", FAMILIES)
def test_attnlrp_equals_the_authors_code(family):
    model, record = _model_and_reference(family)
    assert record["lxt"] == "2.1" and record["transformers"].startswith("4.52")
    if family == "gemma3":  # the window binds: 12 tokens, 5 keys in the local layer
        assert architecture(model).windows(model.config) == [5, None]
    scores, logit = _relevance(model, record)
    assert logit == pytest.approx(record["logit"], rel=1e-6, abs=1e-7)  # the same forward: the weights were carried
    assert _error(scores, record) <= TOLERANCE


#: Each rule, and how to leave it out: its gradient factor back to 1, or its modules out of the wiring.
ABLATIONS = {
    "uniform rule on q·k and softmax·v": ("factors", None),
    "identity rule on RMSNorm": ("wiring", "RMSNorm"),
    "identity rule on the MLP activation": ("wiring", "act"),
    "uniform rule on the gated product": ("products", None),
}


@pytest.mark.parametrize("rule", list(ABLATIONS))
def test_leaving_out_any_rule_breaks_the_parity(rule, monkeypatch):
    model, record = _model_and_reference("gemma3")
    kind, name = ABLATIONS[rule]
    if kind == "factors":
        monkeypatch.setattr(attnlrp_module, "PROJECTION_FACTORS", {"query": 1.0, "key": 1.0, "value": 1.0})
    else:
        arch = architecture(model)
        wiring = arch.relevance_wiring(model)
        if kind == "products":
            wiring = dataclasses.replace(wiring, products=[])
        else:  # the norms out, or everything but the norms (the activations) out
            norms = [m for m in wiring.activations if "RMSNorm" in type(m).__name__]
            keep = [m for m in wiring.activations if m not in norms] if name == "RMSNorm" else norms
            wiring = dataclasses.replace(wiring, activations=keep)
        monkeypatch.setattr(type(arch), "relevance_wiring", lambda self, m, w=wiring: w)
    scores, _ = _relevance(model, record)
    assert _error(scores, record) > 100 * TOLERANCE, rule


@pytest.mark.parametrize("family", FAMILIES)
def test_attnlrp_of_a_generated_answer_equals_the_authors_code(family):
    """The family as a causal language model (``<family>_lm``): the relevance of a generated answer's
    log-probability (:func:`attnlens.attribution.source_scores.answer_attnlrp`) against lxt's, the log-softmax and
    the sum over the answer's tokens plain autograd on top of the rules in both. The same bound as the classifiers'
    (measured: at most 2.2e-7 of the largest relevance)."""
    record = json.loads((REFERENCE / f"{family}_lm.json").read_text(encoding="utf-8"))
    model = draw_decoder(family, 0, "causal_lm", **record["settings"], attn_implementation="eager")
    missing, unexpected = model.load_state_dict(load_file(str(REFERENCE / f"{family}_lm.safetensors")), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    out = answer_attnlrp(freeze(model).eval(), torch.tensor(record["input_ids"]), record["answer_length"])
    assert out.explained == pytest.approx(record["explained"], rel=1e-6, abs=1e-6)  # the same forward
    assert _error(out.scores, record) <= TOLERANCE
    assert abs(out.delta) > 0  # the log-softmax and the softmaxes absorb some: not conserved, as the docs say
    # without the rules (plain gradient × input) the relevances miss by about their own size (measured: 0.99–1.26)
    assert (
        _error(answer_gradient_x_input(model, torch.tensor(record["input_ids"]), record["answer_length"]), record) > 0.5
    )
