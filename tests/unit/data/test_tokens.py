"""Token surface strings and masks (recipes §7.4) on both tokenizer families.

WordPiece: the packaged MiniLM tokenizer. Byte-level BPE: a RoBERTa-style tokenizer trained here on a
few sentences (nothing downloaded), so the byte artefacts of §15 B-13 (``Ċ``, ``ĉ``, ``âĢĶ``) occur.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import torch
from tokenizers import ByteLevelBPETokenizer
from tokenizers.processors import RobertaProcessing
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from attnlens.attribution.ig import baseline_ids
from attnlens.classifier.prediction import encode_texts
from attnlens.data.reading import encode_splits, unknown_note, unknown_tokens
from attnlens.data.tokens import (
    MASKS,
    display_tokens,
    load_vocabulary,
    stopword_source,
    stopwords,
    structural_ids,
    structural_mask,
    surface_pieces,
    token_mask,
    tokenizer_family,
    unknown_count,
)
from attnlens.errors import InputError
from attnlens.models.checkpoints import PACKAGED_MODEL, load_tokenizer, packaged_model_dir, source_tokenizer
from attnlens.pairs.encoder import SiameseEncoder, reference_ids

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


def test_stopwords_are_scikit_learns_list_without_importing_it():
    """The list read from the installed file is the one scikit-learn exports, and reading it imports no sklearn."""
    code = (
        "import sys; from attnlens.data.tokens import stopwords, stopword_source; "
        "words = stopwords(); stopword_source(); assert 'sklearn' not in sys.modules, 'sklearn imported'; "
        "from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS; "
        "assert words == ENGLISH_STOP_WORDS, words ^ ENGLISH_STOP_WORDS; print(len(words))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(stopwords()) > 300


# ------------------------------------------------------------------ text is text, structure is not content

#: Literal special-token spellings of the WordPiece and byte-level families, as a document may contain them.
LITERALS = ["[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]", "<s>", "</s>", "<pad>", "<mask>", "<unk>"]
DOCUMENT = "[CLS] start [SEP] middle [PAD] [PAD] [MASK] " + " ".join(LITERALS) + " end"


@pytest.fixture(scope="module")
def saved_bpe(tmp_path_factory, bpe):
    """The byte-level tokenizer with RoBERTa's framing (<s> … </s>), saved and loaded back by attnlens."""
    folder = tmp_path_factory.mktemp("bpe")
    backend = bpe.backend_tokenizer
    backend.post_processor = RobertaProcessing(("</s>", bpe.sep_token_id), ("<s>", bpe.cls_token_id))
    PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=128,
    ).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["wordpiece", "bpe"])
def test_literal_special_token_strings_are_text(family, saved_bpe, tmp_path):
    """Every way a stage gets a tokenizer reads ``[CLS]``, ``<s>`` … in a document as characters, identically."""
    if family == "wordpiece":
        loaded = [source_tokenizer(PACKAGED_MODEL, 128), load_tokenizer(packaged_model_dir())]
        loaded.append(SiameseEncoder.load(PACKAGED_MODEL, layer=2).tokenizer)
        loaded[0].save_pretrained(tmp_path)  # a model folder's tokenizer, as build_base_model writes it
        loaded.append(load_tokenizer(tmp_path))
    else:
        loaded = [load_tokenizer(saved_bpe), source_tokenizer(str(saved_bpe), 128)]
    tok = loaded[0]
    ids = encode_texts(tok, [DOCUMENT]).input_ids[0]
    for other in loaded[1:]:
        assert encode_texts(other, [DOCUMENT]).input_ids[0] == ids
        assert other(DOCUMENT)["input_ids"] == ids
    structural = structural_ids(tok)
    # framing only at the ends: one start token, one end token, nothing structural in between
    assert [i for i in ids if i in structural] == [ids[0], ids[-1]]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    specials = set(tok.all_special_ids)
    assert not specials & set(ids[1:-1]), tok.convert_ids_to_tokens(ids)
    # the characters come back: decoding the content gives the literals as written
    text = tok.decode(ids[1:-1]).replace(" ", "")
    for literal in LITERALS:
        assert literal.lower() in text.lower()


def test_structural_tokens_frame_the_text_and_unknown_and_mask_are_content(wordpiece):
    tok = load_tokenizer(packaged_model_dir())
    assert structural_ids(tok) == {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    assert tok.unk_token_id not in structural_ids(tok) and tok.mask_token_id not in structural_ids(tok)
    ids = tok("汉字 and 😀 emoji")["input_ids"]
    assert tok.unk_token_id in ids
    mask = structural_mask(tok, ids)
    assert mask.tolist() == [True] + [False] * (len(ids) - 2) + [True]
    # the fixed mask drops structure; an unknown token is not a word, so it drops it as a word filter would
    assert not token_mask(tok, ids, "fixed")[mask].any()


def test_ig_baseline_and_pair_reference_are_the_original_recipes_on_unknown_tokens():
    """recipes §9.1: ``[CLS] + [PAD]·n + [SEP]``; xsbert: everything between the first and last token replaced."""
    tok = load_tokenizer(packaged_model_dir())
    ids = torch.tensor(tok("naïve 汉字 [UNK] text with 😀 and [MASK]")["input_ids"])
    assert (ids == tok.unk_token_id).sum() >= 2
    original = torch.tensor([ids[0].item()] + [tok.pad_token_id] * (len(ids) - 2) + [ids[-1].item()])
    assert torch.equal(baseline_ids(ids, structural_ids(tok), tok.pad_token_id), original)
    assert torch.equal(reference_ids(ids, tok.pad_token_id, structural_ids(tok)), original)


def test_unknown_share_per_split_is_noted_and_warned_above_the_threshold(wordpiece):
    tok = load_tokenizer(packaged_model_dir())
    frames = {
        "train": pd.DataFrame({"text": ["plain english words only", "more words"]}),
        "test": pd.DataFrame({"text": ["中文文本 and 😀😀 emoji", "汉字"]}),
    }
    ids = encode_splits(tok, frames)
    summary = unknown_tokens(tok, ids, max_length=512)
    assert summary["train"] == {"unknown": 0, "content": 6, "share": 0.0}
    # by hand: 中文文本 → 4, emoji → 2 (each emoji one [UNK]), 汉字 → 2 unknown among 4 + 3 + 2 content tokens
    test_ids = [[t for t in r[1:-1]] for r in ids["test"]]
    n_unk = sum(t == tok.unk_token_id for r in test_ids for t in r)
    assert summary["test"]["unknown"] == n_unk and summary["test"]["content"] == sum(map(len, test_ids))
    assert unknown_note("train", summary["train"], tok.unk_token).startswith("train: 0 of 6 content tokens are [UNK]")
    assert unknown_note("test", summary["test"], tok.unk_token).startswith("warning: test: ")
    # cut documents count only what the model sees
    assert unknown_tokens(tok, ids, max_length=3)["test"]["content"] == 2


@pytest.mark.parametrize("family", ["wordpiece", "bpe"])
def test_the_light_vocabulary_answers_as_hugging_face_does(family, saved_bpe, tmp_path):
    """What the tables' and figures' jobs read without transformers (``load_vocabulary``) equals the tokenizer the
    model jobs load (``load_tokenizer``) on the same saved folder: ids, token strings, special ids, every mask,
    the surface strings, the legacy stopword pieces, the unknown count — on the corpus, literal special-token
    strings, byte artefacts and text longer than the saved length limit."""
    if family == "wordpiece":
        source_tokenizer(PACKAGED_MODEL, 128).save_pretrained(tmp_path)  # as build_base_model writes it
        folder = tmp_path
    else:
        folder = saved_bpe
    hf, light = load_tokenizer(folder), load_vocabulary(folder)
    assert light is not hf and not isinstance(light, PreTrainedTokenizerFast)
    assert structural_ids(light) == structural_ids(hf)
    assert [light.unk_token_id, light.pad_token_id] == [hf.unk_token_id, hf.pad_token_id]
    for text in [*CORPUS[:1], DOCUMENT, " ".join(CORPUS)]:  # the last is over the 128 the folder saves
        ids = hf(text)["input_ids"]
        assert light(text)["input_ids"] == ids and light.tokenize(text) == hf.tokenize(text)
        assert light.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
        assert display_tokens(light, ids) == display_tokens(hf, ids)
        for kind in MASKS:
            assert (token_mask(light, ids, kind) == token_mask(hf, ids, kind)).all(), kind
        assert unknown_count(light, [ids]) == unknown_count(hf, [ids])


def test_a_folder_without_a_saved_tokenizer_is_one_line(tmp_path):
    with pytest.raises(InputError, match=r"expected tokenizer\.json and tokenizer_config\.json"):
        load_vocabulary(tmp_path)
