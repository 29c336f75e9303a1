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
from attnlens.tasks.contexts import PromptFormat
from tests.support.tiny_models import minilm_generator

CONTEXT = (
    "The treaty was signed in Lisbon. The weather was cold that spring. "
    "Its author was a clerk named Amal. The harbour froze twice."
)
QUESTION = "Who wrote the treaty?"
ANSWER = "a clerk named Amal"


@pytest.fixture(scope="module")
def decoder():
    return minilm_generator()


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
    with pytest.raises(InputError, match=r"^methods: rollout: expected 'all' or answer methods, some of \['attent"):
        attnlens.cite(CONTEXT, QUESTION, decoder, methods=["rollout"], answer=ANSWER)  # a document method
    with pytest.raises(InputError, match=r"^methods: no_such_method: expected 'all' or answer methods"):
        attnlens.cite(CONTEXT, QUESTION, decoder, methods="no_such_method", answer=ANSWER)
    with pytest.raises(InputError, match=r"^n_ablations: 3: expected minimum 16"):
        attnlens.cite(CONTEXT, QUESTION, decoder, n_ablations=3, answer=ANSWER)
    with pytest.raises(InputError, match=r"^sources: 'words': expected .*one of \['sentence', 'paragraph'\]"):
        attnlens.cite(CONTEXT, QUESTION, decoder, sources="words", answer=ANSWER)
    with pytest.raises(InputError, match=r"^sources: \(list\): expected a splitter's name or a list of non-empty"):
        attnlens.cite(CONTEXT, QUESTION, decoder, sources=[], answer=ANSWER)
    with pytest.raises(InputError, match=r"^example 'answer': sources: expected given source 1 \('Not there\.'\)"):
        attnlens.cite(CONTEXT, QUESTION, decoder, sources=["The treaty was signed in Lisbon.", "Not there."])
    with pytest.raises(InputError, match=r"^template: 'no field': expected pattern"):
        attnlens.cite(CONTEXT, QUESTION, decoder, template="no field", answer=ANSWER)
    with pytest.raises(InputError, match=r"^dtype: 'int8': expected one of \['float32', 'float64', 'bfloat16'"):
        attnlens.cite(CONTEXT, QUESTION, decoder, dtype="int8", answer=ANSWER)
    with pytest.raises(InputError, match=r"^span: \(5, 99\): expected characters of the answer, 0 <= start < end <= 1"):
        attnlens.cite(CONTEXT, QUESTION, decoder, span=(5, 99), answer=ANSWER, methods=["attention_all"])
    with pytest.raises(InputError, match=r"^span: \(3, 3\): expected characters of the answer"):
        attnlens.cite(CONTEXT, QUESTION, decoder, span=(3, 3), answer=ANSWER, methods=["attention_all"])


def test_by_default_only_the_methods_of_a_few_forwards_run_and_the_result_says_what_they_cost(decoder):
    """No ablation is scored for them (each method's forwards are its pass's: one, or one and a backward), the time
    is split into load, answer, ablations and methods, and the top-k frame is each method's ranking cut at k."""
    cited = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER)
    assert list(cited.scores) == ["attention_last", "attention_all", "grad_input", "attnlrp", "attention_pooled"]
    assert "learned_attention left out: no fitted weights (weights=, or a run's results/)" in cited.notes
    assert max(cited.forwards.values()) == 1 and max(cited.backwards.values()) == 1
    assert cited.passes == (3, 2)  # attention (three methods read it), gradient × input's, AttnLRP's: each once
    assert set(cited.timing) == {"load", "answer", "ablations", "methods", "total"}
    assert cited.timing["total"] >= cited.timing["answer"] + cited.timing["methods"] > 0
    top = cited.top(2)
    assert list(top.columns) == ["method", "rank", "source", "text", "score"] and len(top) == 2 * len(cited.scores)
    for method, rows in top.groupby("method", sort=False):
        assert rows["source"].tolist() == [k for k, _, _ in cited.ranked(method)[:2]]
        assert rows["text"].tolist() == [cited.sources[k].text for k in rows["source"]]
    assert cited.top(3, "attnlrp")["rank"].tolist() == [1, 2, 3]
    cost = cited.cost()
    assert cost["forwards"].tolist() == [cited.forwards[m] for m in cited.scores]
    assert np.allclose(cost["x_forward"], cost["seconds"] / cited.forward_seconds)
    everything = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, methods="all", n_ablations=16)
    assert "surrogate" in everything.scores and "learned_attention" not in everything.scores
    assert everything.notes == cited.notes
    assert everything.forwards["surrogate"] <= 16 and everything.forwards["leave_one_out"] == 4


def test_the_keywords_set_the_prompt_and_the_sources(decoder):
    """``template`` and ``system`` make the prompt a plain completion of them (this tokenizer has no chat template),
    ``sources`` as strings are the units, and the answer's log-probability is the one of that prompt."""
    model, tokenizer = decoder
    template, system = "Read: {context}\nQ: {question}\nA:", "Answer briefly."
    parts = ["The treaty was signed in Lisbon. The weather was cold that spring.", "Its author was a clerk named Amal."]
    cited = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, template=template, system=system, sources=parts,
                          methods=["attention_all"])  # fmt: skip
    assert [s.text for s in cited.sources] == parts  # the last sentence is not a given source: left out of the units
    prompt = encode_prompt(tokenizer, "q", CONTEXT, QUESTION, form=PromptFormat(template, system), max_positions=128,
                           reserve=0, given=parts)  # fmt: skip
    ids = answer_ids(tokenizer, ANSWER)
    (lp,) = answer_token_log_probs(model, [prompt.input_ids + ids], [len(ids)])
    assert cited.log_prob == pytest.approx(float(lp.sum()), abs=1e-9)


def test_a_span_of_the_answer_explains_its_tokens_after_the_answers_earlier_ones(decoder):
    """``span`` picks the answer's characters; leave-one-out of the part is, recomputed from scratch, the
    log-probability of the part's tokens after the prompt and the answer's earlier tokens, less the same without each
    source; the end token counts only where the part ends the answer."""
    model, tokenizer = decoder
    start = ANSWER.index("named")
    cited = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, span=(start, start + 3),
                          methods=["leave_one_out", "attnlrp"])  # fmt: skip
    assert cited.part == "nam" and cited.span == (start, start + 3) and cited.answer == ANSWER
    ids = answer_ids(tokenizer, ANSWER)
    before = answer_ids(tokenizer, ANSWER[:start])  # "a clerk": the tokens before the part
    part = ids[len(before) : len(before) + 1]  # "named" is one token of this vocabulary, the part is in it

    def log_p(context) -> float:
        prompt = encode_prompt(tokenizer, "q", context, QUESTION, max_positions=128, reserve=0)
        (lp,) = answer_token_log_probs(model, [prompt.input_ids + before + part], [len(part)])
        return float(lp.sum())

    assert cited.log_prob == pytest.approx(log_p(CONTEXT), abs=1e-9)
    for k, source in enumerate(cited.sources):
        without = CONTEXT[: source.start] + CONTEXT[source.end :].lstrip()
        assert cited.scores["leave_one_out"][k] == pytest.approx(log_p(CONTEXT) - log_p(without), abs=1e-9), k
    whole = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, span=(0, len(ANSWER)), methods=["leave_one_out"])
    plain = attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, methods=["leave_one_out"])
    # the whole answer as a span runs the very same forwards in the same order: equal to the bit on any CPU
    assert np.array_equal(whole.scores["leave_one_out"], plain.scores["leave_one_out"])
    with pytest.raises(InputError, match=r"^span: \(1, 2\): expected characters a token of the answer holds"):
        attnlens.cite(CONTEXT, QUESTION, decoder, answer=ANSWER, span=(1, 2), methods=["leave_one_out"])  # a space


def test_dtype_casts_the_model():
    model, tokenizer = minilm_generator(torch.float32)
    cited = attnlens.cite(CONTEXT, QUESTION, (model, tokenizer), answer=ANSWER, dtype="float64",
                          methods=["attention_all"])  # fmt: skip
    assert next(model.parameters()).dtype == torch.float64 and np.isfinite(cited.scores["attention_all"]).all()


def test_hierarchical_leave_one_out_searches_the_paragraphs_that_matter(decoder):
    """With every paragraph searched it is leave-one-out, number for number; with one, its first ablations are the
    paragraphs' (the one of largest drop recomputed from scratch) and only that paragraph's sentences follow."""
    model, tokenizer = decoder
    context = CONTEXT.replace("spring. ", "spring.\n\n")  # two paragraphs of two sentences
    every = attnlens.cite(context, QUESTION, decoder, answer=ANSWER, methods=["hierarchical", "leave_one_out"],
                          config={"generation": {"hierarchy_keep": 2}})  # fmt: skip
    np.testing.assert_allclose(every.scores["hierarchical"], every.scores["leave_one_out"], atol=1e-9)
    assert every.forwards["hierarchical"] == 2 + 4
    one = attnlens.cite(context, QUESTION, decoder, answer=ANSWER, methods=["hierarchical"],
                        config={"generation": {"hierarchy_keep": 1}})  # fmt: skip
    ids = answer_ids(tokenizer, ANSWER)

    def log_p(text) -> float:
        prompt = encode_prompt(tokenizer, "q", text, QUESTION, max_positions=128, reserve=0)
        (lp,) = answer_token_log_probs(model, [prompt.input_ids + ids], [len(ids)])
        return float(lp.sum())

    paragraphs = context.split("\n\n")
    drops = [log_p(context) - log_p(paragraphs[1 - p]) for p in range(2)]
    top = int(np.argmax(drops))
    searched = [2 * top, 2 * top + 1]
    np.testing.assert_allclose(one.scores["hierarchical"][searched], every.scores["leave_one_out"][searched], atol=1e-9)
    other = [k for k in range(4) if k not in searched]
    np.testing.assert_allclose(one.scores["hierarchical"][other], drops[1 - top] / 2, atol=1e-9)
    assert one.forwards["hierarchical"] == 2 + 2
