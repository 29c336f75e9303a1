"""A context cut into sources (:mod:`attnlens.tasks.contexts`): sentences and paragraphs against hand-cut texts and
against the generated corpus, whose every planted sentence must come out as one source, and each token of a
prompt read back to its source with a WordPiece and a byte-level BPE tokenizer."""

from __future__ import annotations

import itertools

import pytest
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from attnlens.data.corpus import generate_qa_corpus
from attnlens.errors import InputError
from attnlens.models.checkpoints import load_tokenizer, packaged_model_dir
from attnlens.pipeline.config import SyntheticConfig
from attnlens.tasks.contexts import (
    PROMPT_TEMPLATE,
    SPLITTERS,
    PromptFormat,
    Source,
    ablated_context,
    begin_token,
    split_context,
    token_sources,
)
from tests.support.hostile_corpus import HOSTILE

TEXT = (
    'Dr. Smith met J. R. Tolkien, e.g. at the pub. He said "Hi!" Then left... the end? Yes.\n'
    "New line here.\n"
    "\n"
    "A paragraph (two). It ends et al. with this. Fig. 3 shows no. OK then.  "
)
SENTENCES = [
    "Dr. Smith met J. R. Tolkien, e.g. at the pub.",
    'He said "Hi!"',
    "Then left... the end?",
    "Yes.",
    "New line here.",
    "A paragraph (two).",
    "It ends et al. with this.",
    "Fig. 3 shows no.",
    "OK then.",
]


def _check(text: str, sources: list[Source]) -> None:
    """Each source is its span's text, trimmed; the sources are disjoint, in order, and hold every character of
    ``text`` that is not white space."""
    assert all(text[s.start : s.end] == s.text and s.text == s.text.strip() and s.text for s in sources)
    assert all(a.end <= b.start for a, b in itertools.pairwise(sources))
    covered = {i for s in sources for i in range(s.start, s.end)}
    assert {i for i, c in enumerate(text) if not c.isspace()} <= covered


def test_sentences_end_where_a_reader_ends_them():
    sources = split_context(TEXT)
    assert [s.text for s in sources] == SENTENCES
    _check(TEXT, sources)


def test_paragraphs_are_the_runs_of_lines_between_blank_lines():
    sources = split_context(TEXT, by="paragraph")
    assert [s.text for s in sources] == [TEXT.split("\n\n")[0], TEXT.split("\n\n")[1].strip()]
    _check(TEXT, sources)
    assert split_context("  \n\n \t", by="paragraph") == [] and split_context("") == []


def test_every_planted_sentence_of_the_generated_corpus_is_one_source():
    """The question-answering generator knows where it put each planted sentence (the rationales' spans): the
    splitter must cut each of them out exactly, in 30 documents of filler and facts."""
    corpus = generate_qa_corpus(SyntheticConfig(n_documents=30, min_words=120, max_words=200), seed=7)
    texts = dict(zip(corpus.documents["example_id"], corpus.documents["text"], strict=True))
    for example_id, text in texts.items():
        sources = split_context(text)
        _check(text, sources)
        mine = {(s.start, s.end) for s in sources}
        planted = corpus.rationales[corpus.rationales["example_id"] == example_id]
        assert len(planted) and all(
            (a, b) in mine for a, b in zip(planted["char_start"], planted["char_end"], strict=True)
        ), example_id
        assert all(s.text[-1] in ".!?" for s in sources)  # the generator writes whole sentences only


@pytest.mark.parametrize("by", sorted(SPLITTERS.names()))
def test_hostile_text_is_cut_without_losing_a_character(by):
    text = " \n".join(HOSTILE.values())
    _check(text, split_context(text, by=by))


def test_an_unknown_splitter_is_one_line_naming_the_choices():
    with pytest.raises(
        InputError, match=r"sources: expected one of the context splitters \['sentence', 'paragraph'\], got 'word'"
    ):
        split_context(TEXT, by="word")


def _bpe() -> PreTrainedTokenizerFast:
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator([TEXT] * 3, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=trainer._tokenizer, bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize("family", ["wordpiece", "bpe"])
def test_each_token_of_a_prompt_is_read_back_to_its_source(family):
    """The context inside a prompt template: every token of a source lies in that source's span, and the
    tokens of a source cover all of its characters; the template's tokens belong to none."""
    tokenizer = load_tokenizer(packaged_model_dir()) if family == "wordpiece" else _bpe()
    prefix = "Context: "
    prompt = f"{prefix}{TEXT}\n\nQuestion: who met whom?"
    encoded = tokenizer(prompt, return_offsets_mapping=True)
    offsets = [tuple(o) for o in encoded["offset_mapping"]]
    sources = split_context(TEXT)
    owner = token_sources(offsets, sources, context_start=len(prefix))
    for k, source in enumerate(sources):
        mine = [offsets[i] for i in range(len(offsets)) if owner[i] == k]
        assert mine, source.text
        chars = {c for a, b in mine for c in range(a, b) if not prompt[c].isspace()}
        want = {len(prefix) + c for c in range(source.start, source.end) if not TEXT[c].isspace()}
        assert chars == want, source.text
    template = [i for i, (a, b) in enumerate(offsets) if b > a and (b <= len(prefix) or a >= len(prefix) + len(TEXT))]
    assert template and all(owner[i] == -1 for i in template)


def test_an_ablated_context_keeps_the_white_space_before_each_kept_source():
    """As ContextCite rebuilds it: the kept sources in order, each after the first with the white space that
    preceded it (a line break stays a line break)."""
    sources = split_context(TEXT)
    keep = [i % 2 == 0 for i in range(len(sources))]
    expected = "".join(
        (TEXT[sources[i - 1].end : s.start] if n else "") + s.text
        for n, (i, s) in enumerate((i, s) for i, s in enumerate(sources) if keep[i])
    )
    assert ablated_context(TEXT, sources, keep) == expected
    assert ablated_context(TEXT, sources, [True] * len(sources)) == TEXT.strip()
    assert ablated_context(TEXT, sources, [False] * len(sources)) == ""
    assert ablated_context(TEXT, sources, [False, False, False, False, True, True] + [False] * 3) == (
        "New line here.\n\nA paragraph (two)."
    )
    with pytest.raises(ValueError, match="a keep flag per source"):
        ablated_context(TEXT, sources, [True])


def test_a_prompt_is_its_template_inside_the_chat_template_where_there_is_one():
    """And with no template named, the default for the tokenizer's kind: a completion that ends where the answer
    begins for a base model, ContextCite's template for a chat model."""
    tokenizer = load_tokenizer(packaged_model_dir())  # no chat template: the filled template alone
    plain = PromptFormat().build(tokenizer, "A. B.", "why?")
    assert plain.text == "Context: A. B.\nQuestion: why?\nAnswer:"
    assert plain.text[plain.context_start : plain.context_end] == "A. B."
    tokenizer.chat_template = (
        "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    )
    chat = PromptFormat("Q: {question}\nC: {context}").build(tokenizer, "A. B.", "why?")
    assert chat.text == "<u>Q: why?\nC: A. B.</u><a>" and chat.text[chat.context_start : chat.context_end] == "A. B."
    assert PromptFormat().build(tokenizer, "A. B.", "why?").text == "<u>Context: A. B.\n\nQuery: why?</u><a>"
    with pytest.raises(ValueError, match="context"):
        PromptFormat("{question}")


def _bpe_with_begin() -> PreTrainedTokenizerFast:
    """:func:`_bpe`'s tokenizer putting ``<s>`` before every text, as Gemma's puts ``<bos>``."""
    tokenizer = _bpe()
    start = tokenizer.convert_tokens_to_ids("<s>")
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", start)])
    return tokenizer


def test_a_base_models_prompt_is_a_completion_after_its_begin_token_and_a_literal_one_in_the_text_is_text():
    tokenizer = _bpe_with_begin()
    start = tokenizer.convert_tokens_to_ids("<s>")
    assert begin_token(tokenizer) == "<s>" and begin_token(_bpe()) == ""
    context = "Bob met Ann <s> here."
    prompt = PromptFormat("C: {context}\nQ: {question}\nA:", system="Be brief.").build(tokenizer, context, "who?")
    assert prompt.text == "<s>Be brief.\n\nC: Bob met Ann <s> here.\nQ: who?\nA:"
    assert prompt.text[prompt.context_start : prompt.context_end] == context
    assert [prompt.text[a:b] for a, b in prompt.user_spans] == [context, "who?"]
    ids, offsets = prompt.encode(tokenizer)
    assert ids[0] == start and ids.count(start) == 1  # the template's <s> one token, the context's three characters
    inside = [i for i, (a, b) in enumerate(offsets) if prompt.context_start <= a < prompt.context_end]
    assert tokenizer.decode([ids[i] for i in inside]).strip() == context
    plain = PromptFormat("C: {context}").build(tokenizer, "Bob met Ann.", "who?")  # no literal: tokenized whole
    assert plain.encode(tokenizer)[0] == tokenizer(plain.text, add_special_tokens=False)["input_ids"]


def test_a_chat_prompt_is_the_chat_templates_with_its_system_turn_and_its_special_tokens():
    """Hugging Face's ``apply_chat_template(tokenize=True)`` is the reference: the same ids, the system turn where one
    is given, the template's ``<s>`` markers as special tokens."""
    tokenizer = _bpe()
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant: {% endif %}"
    )
    form = PromptFormat("{question} {context}", system="Cite.")
    prompt = form.build(tokenizer, "Bob met Ann.", "Who met?")
    turns = [{"role": "system", "content": "Cite."}, {"role": "user", "content": "Who met? Bob met Ann."}]
    reference = tokenizer.apply_chat_template(turns, tokenize=True, add_generation_prompt=True)
    reference = reference["input_ids"] if isinstance(reference, dict) or hasattr(reference, "keys") else reference
    assert prompt.encode(tokenizer)[0] == list(reference)
    assert prompt.text.startswith("<s>system: Cite.</s><s>user: Who met? ")
    assert [prompt.text[a:b] for a, b in prompt.user_spans] == ["Who met?", "Bob met Ann."]
    with pytest.raises(ValueError, match="no field but"):
        PromptFormat("{context} {answer}")


def test_a_closed_book_prompt_is_the_template_without_its_context_lines():
    """The same question with no context: the lines that hold the context left out (a base model meets no empty
    ``Context:`` slot), in the same wrapping (begin token, system turn); a literal special token in the question stays
    text; where the context shares the question's line, the template with an empty context."""
    tokenizer = _bpe_with_begin()
    form = PromptFormat("Context: {context}\nQuestion: {question}\nAnswer:", system="Be brief.")
    book = form.closed_book(tokenizer, "who <s>?")
    assert book.text == "<s>Be brief.\n\nQuestion: who <s>?\nAnswer:"
    assert [book.text[a:b] for a, b in book.user_spans] == ["who <s>?"] and book.context_start == book.context_end
    assert book.encode(tokenizer)[0].count(tokenizer.convert_tokens_to_ids("<s>")) == 1  # the question's is text
    assert PromptFormat(PROMPT_TEMPLATE).closed_book(_bpe(), "why?").text == "Query: why?"  # no blank line left
    assert PromptFormat().closed_book(_bpe(), "why?").text == "Question: why?\nAnswer:"  # a base model's default
    inline = PromptFormat("Read {context} and answer {question}").closed_book(_bpe(), "why?")
    assert inline.text == "Read  and answer why?"
    tokenizer.chat_template = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"
    assert PromptFormat("{context}\n{question}").closed_book(tokenizer, "why?").text == "<u>why?</u>"
