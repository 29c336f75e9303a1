"""An answer cut into parts (``generation.targets``, :func:`attnlens.generation.responses.answer_parts`): each
sentence of an answer of several a row of its own, explained after the answer's earlier tokens.

What it must say: the parts' tokens partition the answer's (none lost, none shared, in order), each part's prompt is
the whole answer's up to the part, its log-probability is the whole answer's token log-probabilities over its
tokens (so the parts' sum is the answer's), only the last part keeps the end token, an answer of one sentence stays
whole, and the part's ablations score its tokens alone, recomputed here from scratch.

Bound: a float64 decoder; the two sides differ in batching and prefix caching only: 1e-9 on log-probabilities of
order 10.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.generation.ablation import answer_token_log_probs
from attnlens.generation.answer_artifacts import answer_of
from attnlens.generation.prompts import answer_ids, encode_prompt
from attnlens.generation.responses import ablate, answer_parts, one_response
from attnlens.pipeline.config import GenerationConfig
from tests.support.tiny_models import minilm_generator

CONTEXT = "The treaty was signed in Lisbon. Its author was a clerk named Amal. The harbour froze twice."
QUESTION = "Who wrote the treaty and where?"
ANSWER = "A clerk named Amal wrote it. It was signed in Lisbon."


@pytest.fixture(scope="module")
def decoder():
    return minilm_generator()


def test_an_answer_of_two_sentences_is_two_targets_that_partition_its_tokens(decoder):
    model, tokenizer = decoder
    cfg = GenerationConfig.from_dict({})
    whole, _, _ = one_response(model, tokenizer, CONTEXT, QUESTION, ANSWER, cfg)
    frame, notes = answer_parts(tokenizer, pd.DataFrame([whole, whole.copy()]), "sentence")
    assert notes == ["2 of 2 answers cut into their sentences (generation.targets): 4 targets explained"]
    first, second = frame.iloc[0], frame.iloc[1]
    assert [first.example_id, second.example_id] == ["answer/0", "answer/1"]
    ids = answer_of(whole)
    prompt = len(whole.input_ids) - len(ids)
    assert first.prefix_length == 0 and second.prefix_length == first.answer_length
    assert first.answer_length + second.answer_length == len(ids)  # every token in one part, in order
    assert list(second.input_ids) == list(whole.input_ids) and list(first.input_ids) == list(
        whole.input_ids[: prompt + first.answer_length]
    )
    assert first.end_id == -1 and second.end_id == whole.end_id  # the end token belongs to the last part
    assert first.log_prob + second.log_prob == pytest.approx(whole.log_prob, abs=1e-9)
    assert tokenizer.decode(answer_of(second)[second.prefix_length :]).startswith("it was signed")
    one, none = answer_parts(tokenizer, pd.DataFrame([whole]).assign(answer="Amal."), "sentence")
    assert len(one) == 1 and none == []  # one sentence: the answer as it is
    same, _ = answer_parts(tokenizer, pd.DataFrame([whole]), None)
    assert same.equals(pd.DataFrame([whole]))


def test_a_parts_ablations_score_its_tokens_after_the_answers_earlier_ones(decoder):
    """Its leave-one-out ablations against each ablated prompt rebuilt from scratch, followed by the whole first
    sentence and the part."""
    model, tokenizer = decoder
    cfg = GenerationConfig.from_dict({})
    whole, _, _ = one_response(model, tokenizer, CONTEXT, QUESTION, ANSWER, cfg)
    frame, _ = answer_parts(tokenizer, pd.DataFrame([whole]), "sentence")
    second = frame.iloc[1]
    ids = answer_of(whole)
    before, part = ids[: second.prefix_length], ids[second.prefix_length :]
    masks = np.ones((3, 3), dtype=bool) ^ np.eye(3, dtype=bool)
    got = ablate(model, tokenizer, second, masks, cfg)
    assert got.shape == (3, len(part))
    sentences = ["The treaty was signed in Lisbon.", "Its author was a clerk named Amal.", "The harbour froze twice."]
    for k in range(3):
        context = " ".join(s for j, s in enumerate(sentences) if j != k)
        prompt = encode_prompt(tokenizer, "q", context, QUESTION, max_positions=128, reserve=0)
        (lp,) = answer_token_log_probs(model, [prompt.input_ids + before + part], [len(part)])
        np.testing.assert_allclose(got[k], lp, atol=1e-9)
    assert answer_ids(tokenizer, ANSWER) == ids  # the given answer's tokens, as the part's rows hold them
