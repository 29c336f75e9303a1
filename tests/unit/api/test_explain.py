"""The ``explain`` door on its own, without a run: a seeded random two-layer Longformer classifier with the packaged
MiniLM's tokenizer, handed over as a :class:`attnlens.api.Classifier`, explains one short document with the
default settings. What it must say: every method of ``explanations.methods`` scores every token it read, IG's row
explains the target it names and states its δ, the comparison covers both modes, the page is drawn, and bad
arguments are one line each. (``tests/e2e/test_api.py`` checks the same door against a finished run's rows.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

import attnlens
from attnlens.api import Classifier
from attnlens.attribution.methods import method_names
from attnlens.errors import InputError
from attnlens.models.checkpoints import packaged_model_dir
from tests.support.tiny_models import tiny_longformer

TEXT = "The method improves the baseline. Results hold on three datasets. We release the code."


@pytest.fixture(scope="module")
def classifier() -> Classifier:
    tokenizer = AutoTokenizer.from_pretrained(packaged_model_dir())
    model = tiny_longformer(vocab_size=tokenizer.vocab_size, max_positions=130, window=4, pad_token_id=0, num_labels=2)
    model.config.id2label, model.config.label2id = {0: "neg", 1: "pos"}, {"neg": 0, "pos": 1}
    return Classifier(model, tokenizer, torch.device("cpu"), "a tiny Longformer")


def test_explain_scores_every_token_with_every_method(classifier):
    doc = attnlens.explain(TEXT, classifier, label="pos")
    n = len(doc.input_ids)
    assert (
        doc.input_ids[0] == classifier.tokenizer.cls_token_id and doc.input_ids[-1] == classifier.tokenizer.sep_token_id
    )
    assert set(doc.methods) == set(method_names()) and all(s.shape == (n,) for s in doc.methods.values())
    assert all(np.isfinite(s).all() for s in doc.methods.values())
    row = doc.attribution
    assert len(row["scores"]) == n and row["target"] in (0, 1)
    # δ = Σ scores − (F(x) − F(x′)), IG's completeness gap, of the float32 scores summed again here
    assert row["delta"] == pytest.approx(np.sum(row["scores"], dtype=np.float64) - row["gap"], abs=1e-6)
    assert set(doc.similarity["mode"]) == {"legacy", "fixed"}
    assert doc.received.shape[2] == n and "<html" in doc.html().lower()
    assert set(doc.seconds) == {"predict", "attention", "ig", "explanations", "similarity"}


def test_bad_arguments_are_one_line(classifier):
    with pytest.raises(InputError, match="document: text: expected a document with some text"):
        attnlens.explain("   ", classifier)
    with pytest.raises(InputError, match=r"document: question: expected none: the model reads no question"):
        attnlens.explain(TEXT, classifier, question="Why?")
    with pytest.raises(InputError, match="document: label: expected the true label"):
        attnlens.explain(TEXT, classifier, config={"attribution": {"target": "true"}})
