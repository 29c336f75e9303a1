"""Token surface strings and the token masks of recipes §7.4, for WordPiece and byte-level BPE alike.

The original study used a byte-level BPE tokenizer (RoBERTa's), where a leading space is the marker
``Ġ`` and every other byte is mapped to a printable character (``Ċ`` newline, ``ĉ`` tab, ``âĢĶ`` an
em dash); Python's ``str.isalpha`` accepts all of them, so its masks let those artefacts through
(§15 B-13). The embedded default uses a WordPiece tokenizer (``##`` continuation pieces). Here every
token is first turned into its *surface string* — the text it stands for — by the rules of its own
tokenizer family, and the ``fixed`` mask tests that string.

Masks (``keep`` = True means the token counts):

* ``none`` — every token;
* ``alnum_legacy`` — ``raw.isalnum()`` (the older single-example notebook and the stored
  ``attrib_attn_sim_means.csv``);
* ``alpha_stop_legacy`` — ``t.isalpha() and t not in stopset`` where ``t`` is the token with ``Ġ``
  removed (top-k and attribution tables) or the raw token (similarity notebooks), and ``stopset`` is
  the stopword list plus the tokenizer's pieces of each stopword (``Ġthe``, ``'t`` …);
* ``fixed`` — the surface string matches ``^[A-Za-z]+$`` and its lower-cased form is not a stopword;
  structural tokens (CLS, SEP, PAD …) are always dropped.

Stopwords: scikit-learn's ``ENGLISH_STOP_WORDS`` (it ships with the package, so nothing is downloaded
at run time; the original used NLTK's list, which needs a download). :func:`stopword_source` names it.
The list is read from scikit-learn's installed ``feature_extraction/_stop_words.py`` on its own, without
importing scikit-learn (0.85 s that every job importing this module paid for one frozenset);
``tests/unit/data/test_tokens.py`` checks it is the very list scikit-learn exports.

Every function takes the model's tokenizer as Hugging Face loads it or, in the jobs that only draw tables and
figures, as :func:`load_vocabulary` reads the same saved folder with the ``tokenizers`` library alone (no
transformers, no torch): the same token strings, special ids and backend, checked against each other in
``tests/unit/data/test_tokens.py``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tokenizers

from attnlens.errors import InputError

MASKS = ("none", "alnum_legacy", "alpha_stop_legacy", "fixed")
_ALPHA = re.compile(r"[A-Za-z]+")
_BPE_SPACE = "Ġ"


@functools.lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """The English stopword list used by every mask: scikit-learn's ``ENGLISH_STOP_WORDS``.

    Its module (a single frozenset, no imports) is executed from the installed package's file, so
    scikit-learn itself is not imported.
    """
    package = importlib.util.find_spec("sklearn")
    if package is None or not package.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn is not installed: the stopword list ships with it")
    path = Path(package.submodule_search_locations[0]) / "feature_extraction" / "_stop_words.py"
    spec = importlib.util.spec_from_file_location("attnlens._sklearn_stop_words", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return frozenset(module.ENGLISH_STOP_WORDS)


def stopword_source() -> str:
    """Where the stopword list comes from, for provenance records."""
    version = importlib.metadata.version("scikit-learn")
    return f"scikit-learn {version} ENGLISH_STOP_WORDS ({len(stopwords())} words)"


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of the byte-level BPE byte → printable-character table (GPT-2 / RoBERTa)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def tokenizer_family(tokenizer) -> str:
    """``wordpiece``, ``bytelevel``, ``metaspace`` (SentencePiece) or ``other``, from the fast backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "other"
    names = {type(backend.decoder).__name__, type(backend.pre_tokenizer).__name__, type(backend.model).__name__}
    text = repr(backend.decoder) + repr(backend.pre_tokenizer)
    if "WordPiece" in names:
        return "wordpiece"
    if "ByteLevel" in names or "ByteLevel" in text:
        return "bytelevel"
    if "Metaspace" in names or "Metaspace" in text:
        return "metaspace"
    return "other"


def surface_pieces(tokenizer, tokens: Sequence[str]) -> list[tuple[str, bool]]:
    """``(surface string, starts a new word)`` for every token string.

    WordPiece: ``##`` removed, a piece without it starts a word. Byte-level BPE: bytes decoded back
    (a partial UTF-8 sequence becomes U+FFFD), a leading space (``Ġ``) starts a word. SentencePiece:
    ``▁`` is the word start.
    """
    family = tokenizer_family(tokenizer)
    out = []
    if family == "wordpiece":
        prefix = getattr(tokenizer.backend_tokenizer.model, "continuing_subword_prefix", "##")
        for t in tokens:
            cont = t.startswith(prefix)
            out.append((t[len(prefix) :] if cont else t, not cont))
    elif family == "bytelevel":
        decoder = _byte_decoder()
        for t in tokens:
            if all(ch in decoder for ch in t):
                text = bytes(decoder[ch] for ch in t).decode("utf-8", errors="replace")
            else:  # special tokens such as <s> are not byte-encoded
                text = t
            out.append((text.strip(), text[:1].isspace()))
    elif family == "metaspace":
        for t in tokens:
            out.append((t.replace("▁", " ").strip(), t.startswith("▁")))
    else:
        out = [(tokenizer.convert_tokens_to_string([t]).strip(), True) for t in tokens]
    return out


#: Keyword arguments of every tokenizer load: a literal ``[CLS]``, ``<s>`` or ``[MASK]`` in a document is text,
#: tokenised like any other characters, never the special token it spells (docs/deviations.md, D-TEXT).
TEXT_AS_TEXT = {"split_special_tokens": True}

#: Tokenizer attributes naming structural tokens: what frames and pads a sequence, never what it says.
_STRUCTURAL_ATTRS = ("cls_token_id", "sep_token_id", "pad_token_id", "bos_token_id", "eos_token_id")


@functools.lru_cache(maxsize=8)
def structural_ids(tokenizer) -> frozenset[int]:
    """Ids of the *structural* tokens: CLS, SEP, PAD, BOS, EOS and whatever the tokenizer adds around every input.

    The one definition the IG baseline, the pair reference, the similarity metrics, faithfulness,
    topology and the renderers share. ``[UNK]`` and ``[MASK]`` are not structural: in a document
    they stand for text (an unknown word, a masked word) and are attributed, ranked and deleted like
    any other token (docs/deviations.md, D-STRUCT).
    """
    ids = {int(v) for a in _STRUCTURAL_ATTRS if (v := getattr(tokenizer, a, None)) is not None}
    ids.update(int(i) for i in tokenizer("", add_special_tokens=True)["input_ids"])
    return frozenset(ids)


def structural_mask(tokenizer, input_ids: Sequence[int]) -> np.ndarray:
    """``(n,)`` bool, True at the structural tokens of ``input_ids`` (see :func:`structural_ids`)."""
    structural = structural_ids(tokenizer)
    return np.array([int(i) in structural for i in input_ids], dtype=bool)


def unknown_count(tokenizer, id_lists: Sequence[Sequence[int]]) -> tuple[int, int]:
    """``(unknown tokens, content tokens)`` over id lists: how much of the text the vocabulary cannot spell."""
    unk = tokenizer.unk_token_id
    structural = structural_ids(tokenizer)
    n_unk = n_content = 0
    for ids in id_lists:
        arr = np.asarray(ids, dtype=np.int64)
        content = ~np.isin(arr, sorted(structural))
        n_content += int(content.sum())
        if unk is not None:
            n_unk += int((arr[content] == unk).sum())
    return n_unk, n_content


@functools.lru_cache(maxsize=8)
def _legacy_stopset(tokenizer) -> frozenset[str]:
    words = [*sorted(stopwords()), " "]
    pieces = set(words)
    for w in words:
        pieces.update(tokenizer.tokenize(" " + w))
    return frozenset(pieces)


def token_mask(tokenizer, input_ids: Sequence[int], kind: str, strip_marker: bool = True) -> np.ndarray:
    """``(n,)`` bool, True where the token is kept by mask ``kind`` (one of :data:`MASKS`).

    Args:
        tokenizer: the model's tokenizer.
        input_ids: the example's ids.
        kind: ``none``, ``alnum_legacy``, ``alpha_stop_legacy`` or ``fixed``.
        strip_marker: for ``alpha_stop_legacy``, test the token with ``Ġ`` removed (top-k and
            attribution tables) instead of the raw token (similarity notebooks).
    """
    ids = [int(i) for i in input_ids]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    if kind == "none":
        return np.ones(len(ids), dtype=bool)
    if kind == "alnum_legacy":
        return np.array([t.isalnum() for t in tokens], dtype=bool)
    if kind == "alpha_stop_legacy":
        stopset = _legacy_stopset(tokenizer)
        tested = [t.replace(_BPE_SPACE, "") if strip_marker else t for t in tokens]
        return np.array([t.isalpha() and t not in stopset for t in tested], dtype=bool)
    if kind == "fixed":
        structural = structural_ids(tokenizer)
        words = stopwords()
        return np.array(
            [
                i not in structural and bool(_ALPHA.fullmatch(s)) and s.lower() not in words
                for i, (s, _) in zip(ids, surface_pieces(tokenizer, tokens), strict=True)
            ],
            dtype=bool,
        )
    raise ValueError(f"unknown mask {kind!r}; expected one of {MASKS}")


def display_tokens(tokenizer, input_ids: Sequence[int]) -> list[str]:
    """Surface strings of the ids, for tables and figures (``##`` / ``Ġ`` removed, bytes decoded)."""
    return [s for s, _ in surface_pieces(tokenizer, tokenizer.convert_ids_to_tokens([int(i) for i in input_ids]))]


#: The special tokens :class:`Vocabulary` names, as ``<name>_token`` keys of ``tokenizer_config.json``.
_SPECIAL = ("cls", "sep", "pad", "bos", "eos", "unk", "mask")


class Vocabulary:
    """A tokenizer folder the pipeline saved (``save_pretrained``: ``tokenizer.json`` and ``tokenizer_config.json``),
    read with the ``tokenizers`` library alone: what the masks, tables and figures ask of a tokenizer — token
    strings, the special ids, the backend's model, decoder and pre-tokenizer — as Hugging Face's fast tokenizer
    answers it, without importing transformers or torch. It tokenises as :func:`load_tokenizer` does, a literal
    special-token string as text (:data:`TEXT_AS_TEXT`)."""

    def __init__(self, backend: tokenizers.Tokenizer, config: dict):
        self.backend_tokenizer = backend
        backend.encode_special_tokens = TEXT_AS_TEXT["split_special_tokens"]
        backend.no_truncation()  # as Hugging Face's: the saved length limit applies where a caller asks for it
        backend.no_padding()
        for name in _SPECIAL:
            token = config.get(f"{name}_token")
            token = token.get("content") if isinstance(token, dict) else token
            setattr(self, f"{name}_token_id", None if token is None else backend.token_to_id(token))

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        decoder = self.backend_tokenizer.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    def tokenize(self, text: str) -> list[str]:
        return self.backend_tokenizer.encode(text, add_special_tokens=False).tokens

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids}


def load_vocabulary(folder: str | Path) -> Vocabulary:
    """The tokenizer a pipeline folder holds (``results/models/finetuned``), as a light :class:`Vocabulary`."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        backend = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as err:  # OSError, a JSON error, or the tokenizers library's own (a plain Exception)
        raise InputError(
            str(folder), "tokenizer", f"expected tokenizer.json and tokenizer_config.json ({err})"
        ) from None
    return Vocabulary(backend, config)
