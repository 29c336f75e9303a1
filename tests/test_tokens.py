"""Token surface strings and masks (recipes §7.4) on both tokenizer families.

WordPiece: the packaged MiniLM tokenizer. Byte-level BPE: a RoBERTa-style tokenizer trained here on a
few sentences (nothing downloaded), so the byte artefacts of §15 B-13 (``Ċ``, ``ĉ``, ``âĢĶ``) occur.
"""

from __future__ import annotations

import pytest
from tokenizers import ByteLevelBPETokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from attnlens.modeling import packaged_model_dir
from attnlens.tokens import display_tokens, stopword_source, stopwords, surface_pieces, token_mask, tokenizer_family

CORPUS = ["The model attends to the training data — naïve “quotes”\n\tand tabs, 42 times. We learn."] * 30


@pytest.fixture(scope="module")
def bpe():

    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(
        CORPUS, vocab_size=320, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=trainer._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


@pytest.fixture(scope="module")
def wordpiece():

    return AutoTokenizer.from_pretrained(str(packaged_model_dir()))


def _ids(tok, text, special=True):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if special:
        ids = [tok.cls_token_id, *ids, tok.sep_token_id, tok.pad_token_id]
    return ids


def test_families(bpe, wordpiece):
    assert tokenizer_family(bpe) == "bytelevel"
    assert tokenizer_family(wordpiece) == "wordpiece"


def test_bytelevel_surface_strings(bpe):
    tokens = ["Ġmodel", "ĠâĢĶ", "Ċ", "ĉ", "Ġ", "<s>", "naÃ¯ve"]
    pieces = surface_pieces(bpe, tokens)
    assert pieces == [
        ("model", True),
        ("—", True),
        ("", True),
        ("", True),
        ("", True),
        ("<s>", False),
        ("naïve", False),
    ]


def test_wordpiece_surface_strings(wordpiece):
    assert surface_pieces(wordpiece, ["attention", "##s", "[CLS]"]) == [
        ("attention", True),
        ("s", False),
        ("[CLS]", True),
    ]
    assert display_tokens(wordpiece, wordpiece("Tokenization")["input_ids"]) == ["[CLS]", "token", "ization", "[SEP]"]


@pytest.mark.parametrize("family", ["bpe", "wordpiece"])
def test_fixed_mask_keeps_only_content_words(family, request):
    tok = request.getfixturevalue(family)
    ids = _ids(tok, CORPUS[0])
    tokens = tok.convert_ids_to_tokens(ids)
    surface = [s for s, _ in surface_pieces(tok, tokens)]
    keep = token_mask(tok, ids, "fixed")
    for s, t, k, i in zip(surface, tokens, keep, ids, strict=True):
        if i in (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id):
            assert not k, t
        elif s.lower() in stopwords() or not s.isascii() or not s.isalpha():
            assert not k, (t, s)
        else:
            assert k, (t, s)
    assert keep.any()
    kept = {s for s, k in zip(surface, keep, strict=True) if k}
    if family == "wordpiece":
        assert {"model", "training", "attends"} <= kept
    assert not kept & {"The", "the", "We", "—", "42", ""}


def test_legacy_alpha_stop_lets_byte_artefacts_through(bpe):
    """B-13: ``isalpha`` is True for ``Ċ``/``ĉ``/``âĢĶ``; capitalised stopwords survive."""
    ids = _ids(bpe, CORPUS[0], special=False)
    tokens = bpe.convert_ids_to_tokens(ids)
    legacy = dict(zip(tokens, token_mask(bpe, ids, "alpha_stop_legacy"), strict=True))
    fixed = dict(zip(tokens, token_mask(bpe, ids, "fixed"), strict=True))
    for artefact in ("Ċ", "ĉ"):
        assert legacy[artefact] and not fixed[artefact]
    assert not legacy["Ġthe"]  # the tokenised stopword piece is in the legacy set
    assert legacy["The"] and not fixed["The"]
    raw = token_mask(bpe, ids, "alpha_stop_legacy", strip_marker=False)
    assert raw[tokens.index("The")]


def test_legacy_alnum_keeps_digits(wordpiece):
    ids = wordpiece("42 times, ok", add_special_tokens=False)["input_ids"]
    tokens = wordpiece.convert_ids_to_tokens(ids)
    mask = token_mask(wordpiece, ids, "alnum_legacy")
    assert mask[tokens.index("42")] and not mask[tokens.index(",")]
    assert token_mask(wordpiece, ids, "none").all()
    with pytest.raises(ValueError, match="unknown mask"):
        token_mask(wordpiece, ids, "stop")


def test_stopword_source_is_recorded():
    assert "ENGLISH_STOP_WORDS" in stopword_source()
    assert {"the", "and", "we"} <= stopwords()
