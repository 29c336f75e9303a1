"""The ``cite`` door on its own, without a run: a decoder drawn at random (a one-layer Llama of width 32, float64)
with the packaged MiniLM's tokenizer, handed over as ``(model, tokenizer)``, explains a given answer. What it must
say: its sources are the context's sentences, each method scores each source once, leave-one-out is the answer's
log-probability on the whole prompt less that on the prompt rebuilt without the source (recomputed here from
scratch, not from the shared prefix the door uses), the ranking follows the scores, the page and record are
written, and bad arguments are one line each.

Bound: the decoder is float64 and the two sides differ only in how the prompt's forwards are batched and whether the
prefix is cached, so float64 rounding over one layer: 1e-9 absolute on log-probabilities of order 10.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnlens
from attnlens.errors import InputError
from attnlens.generation.ablation import answer_token_log_probs
from attnlens.generation.prompts import answer_ids, encode_prompt
from attnlens.models.loading import build_generator
from attnlens.pipeline.config import ModelConfig

CONTEXT = (
    "The treaty was signed in Lisbon. The weather was cold that spring. "
    "Its author was a clerk named Amal. The harbour froze twice."
)
QUESTION = "Who wrote the treaty?"
ANSWER = "a clerk named Amal"


@pytest.fixture(scope="module")
def decoder():
    cfg = ModelConfig.from_dict({"source": "from_config", "architecture": "llama", "max_length": 128})
    model, tokenizer = build_generator(cfg, hidden_size=32, num_layers=1, num_heads=2)
    torch.manual_seed(0)
    return model.double().eval(), tokenizer


def test_cite_explains_a_given_answer_on_a_model_in_memory(decoder, tmp_path):
    model, tokenizer = decoder
    cited = attnlens.cite(CONTEXT, QUESTION, decoder, methods=["leave_one_out", "attention_all", "grad_input"],
                          answer=ANSWER)  # fmt: skip
    assert [s.text for s in cited.sources] == [
        "The treaty was signed in Lisbon.",
        "The weather was cold that spring.",
        "Its author was a clerk named Amal.",
        "The harbour froze twice.",
    ]
    assert cited.answer == ANSWER and cited.finished
    assert {m: len(s) for m, s in cited.scores.items()} == dict.fromkeys(cited.scores, 4)
    # leave-one-out, recomputed from scratch: the prompt built again from the context without each source
    ids = answer_ids(tokenizer, ANSWER)
    full = encode_prompt(tokenizer, "q", CONTEXT, QUESTION, max_positions=128, reserve=0)

    def log_p(prompt) -> float:
        (lp,) = answer_token_log_probs(model, [prompt.input_ids + ids], [len(ids)])
        return float(lp.sum())

    for k, source in enumerate(cited.sources):
        without = CONTEXT[: source.start] + CONTEXT[source.end :].lstrip()
        dropped = encode_prompt(tokenizer, "q", without, QUESTION, max_positions=128, reserve=0)
        assert cited.scores["leave_one_out"][k] == pytest.approx(log_p(full) - log_p(dropped), abs=1e-9), k
    assert cited.log_prob == pytest.approx(log_p(full), abs=1e-9)
    assert np.abs(cited.scores["leave_one_out"]).min() > 1e-6  # each removal moves the answer: the check can fail
    order = [k for k, _, _ in cited.ranked("leave_one_out")]
    assert order == list(np.argsort(-cited.scores["leave_one_out"], kind="stable"))
    written = cited.save(tmp_path / "cited")
    record = json.loads(written["citation"].read_text(encoding="utf-8"))
    assert record["answer"] == ANSWER and len(record["scores"]["leave_one_out"]) == 4
    assert "<html" in written["page"].read_text(encoding="utf-8").lower()


def test_bad_arguments_are_one_line(decoder):
    with pytest.raises(InputError, match=r"question: .*expected a question"):
        attnlens.cite(CONTEXT, "  ", decoder)
    with pytest.raises(InputError, match="methods: learned_attention: expected fitted weights"):
        attnlens.cite(CONTEXT, QUESTION, decoder, methods=["learned_attention"], answer=ANSWER)
    with pytest.raises(InputError, match=r"methods: rollout: .*no answer scorer"):
        attnlens.cite(CONTEXT, QUESTION, decoder, methods=["rollout"], answer=ANSWER)
