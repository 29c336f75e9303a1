"""One example's prompt as a causal language model reads it: the context cut into sources, put into the template
(:func:`attnlens.tasks.contexts.build_prompt`), tokenized with each token's source, and cut to the model's positions.

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
    PROMPT_TEMPLATE,
    Source,
    build_prompt,
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
    template: str = PROMPT_TEMPLATE,
    max_positions: int,
    reserve: int,
    given: Sequence[str] | None = None,
) -> AnswerPrompt:
    """``context`` cut into sources by the splitter ``sources`` (or into the ``given`` sources, spans of it in
    order: ``data.sources_column``) and put with ``question`` into ``template``; sources dropped from the end until
    the prompt leaves ``reserve`` positions of ``max_positions`` for the answer.

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
    ids, owner = _tokenized(tokenizer, context, spans, question, template)
    empty = [k for k in range(len(spans)) if not (owner == k).any()]
    if empty:
        raise InputError(
            where,
            "sources",
            f"expected every source to hold a token, source {empty[0]} ({spans[empty[0]].text!r}) has none",
        )
    full, kept = len(ids), len(spans)
    while len(ids) + reserve > max_positions and kept > 1:
        kept -= 1
        ids, owner = _tokenized(tokenizer, context, spans[:kept], question, template)
    if len(ids) + reserve > max_positions:
        raise InputError(
            where,
            "context",
            f"expected a prompt that fits the model's {max_positions} positions with {reserve} for the answer, got "
            f"{len(ids)} tokens with only the first source of its context",
        )
    text = context[: spans[kept - 1].end]
    return AnswerPrompt(ids, owner, spans[:kept], text, question, offset, len(spans) - kept, full - len(ids))


def _tokenized(tokenizer, context: str, spans: Sequence[Source], question: str, template: str):
    """The prompt of ``context`` up to its last source in ``spans``, its ids and each token's source."""
    prompt = build_prompt(tokenizer, context[: spans[-1].end], question, template)
    encoded = tokenizer(prompt.text, add_special_tokens=False, return_offsets_mapping=True)
    return list(encoded["input_ids"]), token_sources(encoded["offset_mapping"], spans, prompt.context_start)
