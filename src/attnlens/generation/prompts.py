"""One example's prompt as a causal language model reads it: the context cut into sources, put into the template
(:class:`attnlens.tasks.contexts.PromptFormat`), tokenized with each token's source, and cut to the model's positions.

A prompt that would leave fewer than ``max_new_tokens`` positions for the answer loses sources from the context's
end, whole, until it fits; how many sources and tokens were cut is kept with it (the run notes count them). The
answer is tokenized on its own and ends in the tokenizer's end-of-sequence token where the model is trained on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlens.errors import InputError
from attnlens.tasks.contexts import (
    DEFAULT_FORMAT,
    PromptFormat,
    Source,
    begin_token,
    locate_sources,
    split_context,
    token_sources,
)


@dataclass(frozen=True)
class AnswerPrompt:
    """An example's prompt: its ids, each token's source (−1: none), the sources it keeps, and what was cut."""

    input_ids: list[int]
    owner: np.ndarray
    sources: list[Source]  # their spans in ``context``
    context: str  # the context the prompt holds: from its first source to its last kept one
    question: str
    offset: int = 0  # where ``context`` starts in the example's own context
    cut_sources: int = 0
    cut_tokens: int = 0

    @property
    def n_sources(self) -> int:
        return len(self.sources)


def end_token(tokenizer) -> int:
    """The token that ends an answer: the tokenizer's end-of-sequence token, or its separator (a BERT vocabulary's
    ``[SEP]``, the embedded default's)."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if eos is None:
        raise InputError("model", "tokenizer", "expected an end-of-sequence or a separator token to end an answer")
    return int(eos)


def stop_strings(stop: Sequence[str] | None, tokenizer) -> list[str]:
    """The strings that end a greedy answer (``generation.stop``): the given ones, or by default a newline for a
    tokenizer without a chat template (a base model has no end-of-turn token to stop at) and none for a chat model
    (its end-of-turn token, the tokenizer's end-of-sequence token, ends the answer)."""
    if stop is not None:
        return list(stop)
    return [] if getattr(tokenizer, "chat_template", None) else ["\n"]


def completion_notes(tokenizer, stop: Sequence[str] | None) -> list[str]:
    """The run note of a tokenizer without a chat template: its prompts are plain completions, its answers end at
    their stop strings (none for a chat model)."""
    if getattr(tokenizer, "chat_template", None):
        return []
    begin = f"after its begin-of-sequence token {begin_token(tokenizer)!r}" if begin_token(tokenizer) else "alone"
    return [
        f"the tokenizer has no chat template: each prompt is generation.template {begin}, a plain completion, and an "
        f"answer ends at the first of {stop_strings(stop, tokenizer)} (generation.stop) or at the end token"
    ]


def answer_ids(tokenizer, answer: str, end: bool = False) -> list[int]:
    """The ids of an answer's text as the model generates it after the prompt (with the end token: ``end``)."""
    ids = tokenizer(" " + answer.strip(), add_special_tokens=False)["input_ids"]
    return [*ids, end_token(tokenizer)] if end else list(ids)


def encode_prompt(
    tokenizer,
    example_id: str,
    context: str,
    question: str,
    *,
    sources: str = "sentence",
    form: PromptFormat = DEFAULT_FORMAT,
    max_positions: int,
    reserve: int,
    given: Sequence[str] | None = None,
) -> AnswerPrompt:
    """``context`` cut into sources by the splitter ``sources`` (or into the ``given`` sources, spans of it in
    order: ``data.sources_column``) and put with ``question`` into the prompt ``form``; sources dropped from the end
    until the prompt leaves ``reserve`` positions of ``max_positions`` for the answer.

    An empty context, a source of no token and a prompt that fits with no source are one :class:`InputError` each,
    naming the example."""
    where = f"example {example_id!r}"
    if not context.strip():
        raise InputError(where, "context", "expected a context with text, got an empty one")
    offset = len(context) - len(context.lstrip())
    context = context.strip()
    try:
        spans = locate_sources(context, given) if given is not None and len(given) else split_context(context, sources)
    except ValueError as err:
        raise InputError(where, "sources", str(err)) from None
    ids, owner = _tokenized(tokenizer, context, spans, question, form)
    empty = [k for k in range(len(spans)) if not (owner == k).any()]
    if empty:
        raise InputError(
            where,
            "sources",
            f"expected every source to hold a token, source {empty[0]} ({spans[empty[0]].text!r}) has none",
        )
    full, kept = len(ids), len(spans)
    if full + reserve > max_positions and kept > 1:
        kept, ids, owner = _fitted(tokenizer, context, spans, question, form, owner, max_positions - reserve)
    if len(ids) + reserve > max_positions:
        raise InputError(
            where,
            "context",
            f"expected a prompt that fits the model's {max_positions} positions with {reserve} for the answer, got "
            f"{len(ids)} tokens with only the first source of its context",
        )
    text = context[: spans[kept - 1].end]
    return AnswerPrompt(ids, owner, spans[:kept], text, question, offset, len(spans) - kept, full - len(ids))


def _fitted(tokenizer, context, spans, question, form, owner: np.ndarray, room: int):
    """The most sources from the context's start whose prompt has at most ``room`` tokens, its ids and owners.

    The whole prompt's tokens say where each source ends and how long the prompt's tail (the question, the template)
    is, so one tokenization of the estimate and a step or two at its edge find it, where dropping one source a
    tokenization at a time costs the square of the sources (a 30 000-sentence context took minutes)."""
    token = np.arange(len(owner))
    last = np.full(len(spans), -1, dtype=np.int64)
    np.maximum.at(last, owner[owner >= 0], token[owner >= 0])
    tail = len(owner) - 1 - int(last[-1])
    kept = max(1, int(np.searchsorted(np.maximum.accumulate(last) + 1 + tail, room, side="right")))
    ids, owner = _tokenized(tokenizer, context, spans[:kept], question, form)
    while len(ids) > room and kept > 1:  # the cut's own tokens can differ from the whole prompt's at its edge
        kept -= 1
        ids, owner = _tokenized(tokenizer, context, spans[:kept], question, form)
    while kept < len(spans) and len(ids) <= room:
        more = _tokenized(tokenizer, context, spans[: kept + 1], question, form)
        if len(more[0]) > room:
            break
        kept, (ids, owner) = kept + 1, more
    return kept, ids, owner


def _tokenized(tokenizer, context: str, spans: Sequence[Source], question: str, form: PromptFormat):
    """The prompt of ``context`` up to its last source in ``spans``, its ids and each token's source."""
    prompt = form.build(tokenizer, context[: spans[-1].end], question)
    ids, offsets = prompt.encode(tokenizer)
    return ids, token_sources(offsets, spans, prompt.context_start)
