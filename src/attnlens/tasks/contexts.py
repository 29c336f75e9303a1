"""A context cut into sources: the units (sentences, paragraphs) that a generated answer is attributed to, each
with its character span in the context and, once the prompt is tokenized, its tokens.

Sentences are found offline, with no model or download: every line is cut apart (as ContextCite cuts lines
before it splits sentences), and within a line a sentence ends at ``.``, ``!`` or ``?`` (and any closing quotes
or brackets after it) followed by white space and a character that can begin a sentence (not a lower-case
letter), unless the word before the full stop is an abbreviation that rarely ends a sentence (*Dr.*, *e.g.*,
*et al.*, an initial). A paragraph is a run of lines between blank lines. A source never holds the white space
around it, and the sources of a context are disjoint and in order.

A context with sources deleted is rebuilt as ContextCite rebuilds it (:func:`ablated_context`), and put into its
prompt (:class:`PromptFormat`): a template with the question, inside the tokenizer's chat template where it has one,
a plain completion after the tokenizer's begin-of-sequence token where it has none.
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnlens.registry import Registry


@dataclass(frozen=True)
class Source:
    """One source of a context: its text, ``context[start:end]``."""

    start: int
    end: int
    text: str


#: How a context is cut into sources, by name (``sentence``, ``paragraph``): each maps a text to the character
#: spans of its sources.
SPLITTERS: Registry[Callable[[str], list[tuple[int, int]]]] = Registry("context splitters", "generation.sources")

#: Words after which a full stop rarely ends a sentence (compared in lower case, without the stop).
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "cf", "e.g", "i.e", "et", "al", "fig", "figs"}
    | {"eq", "eqs", "vol", "pp", "ed", "eds", "approx", "dept", "univ"}
    | {"jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"}
)
#: A sentence's end: its terminal marks and any closing quotes or brackets, before white space and the next
#: character (which must not be a lower-case letter: :func:`sentence_spans`).
_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s+(\S))")
_WORD_BEFORE = re.compile(r"([\w.]+)$")


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """``(start, end)`` without the white space at either end; None where nothing else is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _lines(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for line in text.splitlines(keepends=True):
        spans.append((start, start + len(line)))
        start += len(line)
    return spans


def _abbreviation(text: str, stop: int) -> bool:
    """Whether the full stop at ``stop`` closes an abbreviation or an initial rather than a sentence."""
    if text[stop] != ".":
        return False
    word = _WORD_BEFORE.search(text[max(0, stop - 24) : stop])
    token = word.group(1).lower() if word else ""
    return token in ABBREVIATIONS or (len(token) == 1 and token.isalpha())


@SPLITTERS.register("sentence")
def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of ``text``'s sentences (the module's docstring says where one ends)."""
    spans = []
    for line_start, line_end in _lines(text):
        line = text[line_start:line_end]
        start = 0
        for match in _END.finditer(line):
            end = match.end()
            if match.group(1).islower() or _abbreviation(line, match.start()):
                continue
            span = _trimmed(text, line_start + start, line_start + end)
            if span:
                spans.append(span)
            start = end
        span = _trimmed(text, line_start + start, line_end)
        if span:
            spans.append(span)
    return spans


@SPLITTERS.register("paragraph")
def paragraph_spans(text: str) -> list[tuple[int, int]]:
    """The character spans of ``text``'s paragraphs: runs of lines between blank lines."""
    spans, start = [], 0
    for match in re.finditer(r"\n[ \t\r\f\v]*\n\s*", text):
        span = _trimmed(text, start, match.start())
        if span:
            spans.append(span)
        start = match.end()
    span = _trimmed(text, start, len(text))
    if span:
        spans.append(span)
    return spans


def given_sources(cell) -> list[str]:
    """A cell of ``data.sources_column`` as a list of source texts: a list of strings, or a JSON list of them in a
    string (a CSV cell); an empty cell is no sources. A :class:`ValueError` says what else it holds."""
    if cell is None or (isinstance(cell, float) and cell != cell):
        return []
    if isinstance(cell, str):
        if not cell.strip():
            return []
        try:
            cell = json.loads(cell)
        except json.JSONDecodeError:
            raise ValueError(f"expected a JSON list of strings, got {cell[:40]!r}") from None
    if not isinstance(cell, list | tuple | np.ndarray) or not all(isinstance(s, str) and s.strip() for s in cell):
        raise ValueError(f"expected a list of non-empty strings, got {str(cell)[:40]!r}")
    return [str(s) for s in cell]


def locate_sources(text: str, given: Sequence[str]) -> list[Source]:
    """The given sources' spans in ``text``, each found after the previous one (white space around each trimmed); a
    :class:`ValueError` names the first that is not there."""
    out, start = [], 0
    for k, source in enumerate(given):
        needle = source.strip()
        at = text.find(needle, start)
        if at < 0:
            after = f" after source {k - 1}" if k else ""
            raise ValueError(f"expected given source {k} ({needle[:40]!r}) in the context{after}")
        out.append(Source(at, at + len(needle), needle))
        start = at + len(needle)
    return out


def split_context(text: str, by: str = "sentence") -> list[Source]:
    """``text`` cut into sources by the splitter ``by`` (:data:`SPLITTERS`)."""
    return [Source(start, end, text[start:end]) for start, end in SPLITTERS.get(by)(text)]


def token_sources(offsets: Sequence[tuple[int, int]], sources: Sequence[Source], context_start: int = 0) -> np.ndarray:
    """``(tokens,)`` int: the index of the source each token of a prompt belongs to, ``-1`` for a token of no
    source (the template's, a special token, white space between sources).

    ``offsets`` are the tokens' character spans in the prompt (a fast tokenizer's ``offset_mapping``; ``(0, 0)``
    for a special token), and the context starts at ``context_start`` in the prompt. A token belongs to the
    source that holds its first character that is not white space."""
    starts = np.array([s.start for s in sources], dtype=np.int64) + context_start
    ends = np.array([s.end for s in sources], dtype=np.int64) + context_start
    spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    a, b = spans[:, 0], spans[:, 1]
    k = np.searchsorted(starts, a, side="right") - 1  # the last source starting at or before the token
    inside = (k >= 0) & (a < ends[np.maximum(k, 0)]) if len(starts) else np.zeros(len(a), dtype=bool)
    nxt = np.minimum(k + 1, len(starts) - 1)
    # a token that begins with the white space before a source
    before = ~inside & (k + 1 < len(starts)) & (starts[nxt] < b) if len(starts) else inside
    out = np.where(inside, k, np.where(before, k + 1, -1))
    out[b <= a] = -1
    return out.astype(np.int64)


#: The prompt a context and its question are put into when the configuration names none: ContextCite's default, the
#: user's turn of a chat template …
PROMPT_TEMPLATE = "Context: {context}\n\nQuery: {question}"
#: … and for a tokenizer without one (a base model), a plain completion that ends where the answer begins.
COMPLETION_TEMPLATE = "Context: {context}\nQuestion: {question}\nAnswer:"


@dataclass(frozen=True)
class Prompt:
    """A prompt as the model reads it: its text, where the context sits in it, and the spans of the user's own text
    (the context and the question; characters)."""

    text: str
    context_start: int
    context_end: int
    user_spans: tuple[tuple[int, int], ...] = ()

    def encode(self, tokenizer) -> tuple[list[int], list[tuple[int, int]]]:
        """The prompt's ids and each token's character span. The special tokens the template, the chat template and
        the begin-of-sequence token put around the user's text are the special tokens they spell (``<|im_start|>``
        one token); inside the context and the question a literal special-token string is text, as in every
        document attnlens reads (docs/deviations.md, D-TEXT). Tokenized whole, as Hugging Face tokenizes a chat
        prompt, where the user's text spells no special token; else in pieces between the template's special tokens
        (which is how a tokenizer splits its text at special tokens anyway)."""
        whole = tokenizer(self.text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=False)
        special = special_ids(tokenizer)
        tokens = list(zip(whole["input_ids"], whole["offset_mapping"], strict=True))
        if not any(i in special and self._in_user_text(a, b) for i, (a, b) in tokens):
            return list(whole["input_ids"]), [tuple(o) for o in whole["offset_mapping"]]
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        start = 0
        for i, (a, b) in tokens:
            if i not in special or self._in_user_text(a, b):
                continue
            self._text_piece(tokenizer, start, a, ids, offsets)
            ids.append(int(i))
            offsets.append((a, b))
            start = b
        self._text_piece(tokenizer, start, len(self.text), ids, offsets)
        return ids, offsets

    def _in_user_text(self, start: int, end: int) -> bool:
        return any(u < end and start < v for u, v in self.user_spans)

    def _text_piece(self, tokenizer, start: int, end: int, ids: list, offsets: list) -> None:
        if end > start:
            piece = tokenizer(
                self.text[start:end], add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True
            )
            ids += piece["input_ids"]
            offsets += [(a + start, b + start) for a, b in piece["offset_mapping"]]


@dataclass(frozen=True)
class PromptFormat:
    """How a context and its question become a model's prompt (``generation.template`` and ``system_prompt``).

    ``template`` is filled with the context and the question (None: :data:`PROMPT_TEMPLATE` where the tokenizer has a
    chat template, :data:`COMPLETION_TEMPLATE` where it has none). Where it has one, the filled template is the
    user's turn, after a system turn of ``system`` (None: none, so the chat template's own default
    where it has one), with the assistant's turn opened. Where it has none (a base model) the prompt is a plain
    completion: ``system`` and a blank line (where given), then the filled template, after the tokenizer's
    begin-of-sequence token where it puts one before every text (Gemma's ``<bos>``, Llama's ``<s>``; a BERT
    vocabulary, the from-scratch control's, has none)."""

    template: str | None = None
    system: str | None = None

    def __post_init__(self) -> None:
        if self.template is None:
            return
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None]
        except ValueError as err:  # an unmatched brace
            raise ValueError(f"template: expected a format string, got {self.template!r} ({err})") from None
        if "context" not in fields or not set(fields) <= {"context", "question"}:
            raise ValueError(
                f"template: expected a {{context}} field and no field but {{question}}, got {self.template!r}"
            )

    @classmethod
    def of(cls, cfg) -> PromptFormat:
        """The format the ``generation`` section (any object with its keys) names."""
        return cls(cfg.template, cfg.system_prompt)

    def template_for(self, tokenizer) -> str:
        """The template the prompts for ``tokenizer`` fill: the one given, or the default for its kind."""
        if self.template is not None:
            return self.template
        return PROMPT_TEMPLATE if getattr(tokenizer, "chat_template", None) else COMPLETION_TEMPLATE

    def build(self, tokenizer, context: str, question: str) -> Prompt:
        """The prompt of ``context`` and ``question`` for ``tokenizer`` (the class docstring)."""
        user, spans, at = self._filled(self.template_for(tokenizer), context, question)
        text = self._wrapped(tokenizer, user)
        start = text.index(user)
        return Prompt(text, start + at, start + at + len(context), tuple((start + a, start + b) for a, b in spans))

    def closed_book(self, tokenizer, question: str) -> Prompt:
        """The prompt of ``question`` with no context: the template without the lines that hold its context
        (``"Context: {context}\nQuestion: {question}\nAnswer:"`` asks ``"Question: …\nAnswer:"``), so that the
        model meets no empty slot (a base model answers an empty ``Context:`` line with a newline, which ends its
        answer); where the context shares a line with the question, the template with an empty context. Its
        context is the empty span where the user's text starts."""
        lines = self.template_for(tokenizer).split("\n")
        fields = [{f for _, f, _, _ in string.Formatter().parse(line)} for line in lines]
        if any({"context", "question"} <= named for named in fields):
            return self.build(tokenizer, "", question)
        kept = "\n".join(line for line, named in zip(lines, fields, strict=True) if "context" not in named).strip("\n")
        user, spans, _ = self._filled(kept, "", question)
        text = self._wrapped(tokenizer, user)
        start = text.index(user)
        return Prompt(text, start, start, tuple((start + a, start + b) for a, b in spans))

    def _wrapped(self, tokenizer, user: str) -> str:
        """The user's text in the tokenizer's chat template (after the system turn), or as a plain completion."""
        if getattr(tokenizer, "chat_template", None):
            turns = [{"role": "system", "content": self.system}] if self.system is not None else []
            text = tokenizer.apply_chat_template(
                [*turns, {"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
            )
        else:
            system = f"{self.system}\n\n" if self.system is not None else ""
            text = begin_token(tokenizer) + system + user
        return text

    @staticmethod
    def _filled(template: str, context: str, question: str) -> tuple[str, list[tuple[int, int]], int]:
        """``template`` (or a part of it) filled, the spans of the context and the question in it, and where the
        context starts."""
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        at, pos = -1, 0
        for literal, field, spec, conversion in string.Formatter().parse(template):
            parts.append(literal)
            pos += len(literal)
            if field is None:
                continue
            value = {"context": context, "question": question}[field]
            value = format(repr(value) if conversion == "r" else value, spec or "")
            at = pos if field == "context" and at < 0 else at
            spans.append((pos, pos + len(value)))
            parts.append(value)
            pos += len(value)
        return "".join(parts), spans, at


#: The default template for the tokenizer's kind, no system turn: the format a caller that names none gets.
DEFAULT_FORMAT = PromptFormat()


@functools.lru_cache(maxsize=8)
def special_ids(tokenizer) -> frozenset[int]:
    """Every id the tokenizer treats as special: its named special tokens and the added tokens marked special (Gemma
    3's vocabulary has 6 249). Cached per tokenizer: each ablation's prompt is encoded with it."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return frozenset(tokenizer.all_special_ids) | {i for i, token in added.items() if token.special}


@functools.lru_cache(maxsize=8)
def begin_token(tokenizer) -> str:
    """The tokenizer's begin-of-sequence token where it puts one before every text it encodes; ``""`` otherwise."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos:
        return ""
    ids = tokenizer("a")["input_ids"]
    return bos if ids and ids[0] == tokenizer.bos_token_id else ""


def ablated_context(context: str, sources: Sequence[Source], keep: Sequence[bool]) -> str:
    """The context with the sources whose ``keep`` is false deleted: each kept source after the first keeps the
    white space that preceded it in the context, as ContextCite rebuilds an ablated context."""
    if len(keep) != len(sources):
        raise ValueError(f"expected a keep flag per source ({len(sources)}), got {len(keep)}")
    parts: list[str] = []
    for k, (source, kept) in enumerate(zip(sources, keep, strict=True)):
        if kept:
            before = context[sources[k - 1].end : source.start] if k else ""
            parts.append((before if parts else "") + source.text)
    return "".join(parts)


@dataclass(frozen=True)
class Ablations:
    """What a removal gives the scoring: one token sequence per mask (the answer after the prompt) and, for a
    removal that masks, each sequence's keep flags over its tokens (None: every token attended)."""

    sequences: list[list[int]]
    keep: list[list[int]] | None


#: How a source is taken out of its context, by name (the module's docstring): each maps ``(tokenizer, context,
#: sources, question, form, answer, masks)`` (``form`` a :class:`PromptFormat`) to the :class:`Ablations` to score.
REMOVALS: Registry[Callable[..., Ablations]] = Registry("source removals", "generation.removal")


@REMOVALS.register("delete")
def deleted(tokenizer, context, sources, question, form, answer, masks) -> Ablations:
    """Each mask's prompt rebuilt from its kept sources (:func:`~attnlens.tasks.contexts.ablated_context`)."""
    prompts = [form.build(tokenizer, ablated_context(context, sources, keep), question) for keep in masks]
    return Ablations([prompt.encode(tokenizer)[0] + answer for prompt in prompts], None)


@REMOVALS.register("mask")
def masked(tokenizer, context, sources, question, form, answer, masks) -> Ablations:
    """The full prompt for every mask, its removed sources' tokens out of attention
    (:func:`~attnlens.tasks.contexts.token_sources`)."""
    prompt = form.build(tokenizer, context, question)
    ids, offsets = prompt.encode(tokenizer)
    owner = token_sources(offsets, sources, prompt.context_start)
    keep = [[int(o < 0 or kept[o]) for o in owner] + [1] * len(answer) for kept in masks]
    return Ablations([ids + answer] * len(masks), keep)
