"""What the generator's rules write and read back: the trained model's and its metrics' schemas, and the columns of
``generate_answers``' responses (one row an explained answer: its prompt and answer ids, how many of the answer's
first tokens are read but not explained (a part of an answer: ``prefix_length``), the token that ended the answer,
each token's source, the sources' spans and planted flags, the answer's token log-probabilities and scores).

Plain pyarrow: the light rules that tabulate and draw the answers read them without loading a model.
"""

from __future__ import annotations

import pyarrow as pa

from attnlens.tasks.contexts import Source

GENERATOR_SCHEMA = "generator/v1"
GENERATOR_METRICS_SCHEMA = "generator_metrics/v1"
RESPONSES_SCHEMA = "generation_responses/v3"

RESPONSE_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("context", pa.string()),
        ("question", pa.string()),
        ("reference", pa.string()),
        ("answer", pa.string()),
        ("target", pa.string()),
        ("exact_match", pa.float64()),
        ("input_ids", pa.list_(pa.int32())),
        ("answer_length", pa.int32()),
        ("prefix_length", pa.int32()),
        ("end_id", pa.int32()),
        ("owner", pa.list_(pa.int32())),
        ("source_start", pa.list_(pa.int64())),
        ("source_end", pa.list_(pa.int64())),
        ("source_kind", pa.list_(pa.int32())),
        ("planted", pa.list_(pa.bool_())),
        ("token_log_probs", pa.list_(pa.float64())),
        ("log_prob", pa.float64()),
        ("logit", pa.float64()),
        ("cut_sources", pa.int32()),
        ("cut_tokens", pa.int32()),
        ("structure", pa.string()),
        ("follows_context", pa.float64()),
        ("closed_book", pa.string()),
        ("same_as_closed_book", pa.float64()),
    ]
)


def response_sources(row) -> list[Source]:
    """A response row's sources: spans of its (possibly cut) context."""
    return [Source(int(a), int(b), row.context[a:b]) for a, b in zip(row.source_start, row.source_end, strict=True)]


def answer_of(row, end: bool = False) -> list[int]:
    """A response row's answer ids after its prompt: the explained ``answer_length`` last of its ``input_ids`` and
    the ``prefix_length`` before them (the answer's earlier tokens, where a part of it is explained); with ``end``,
    then the token that ended the answer, where one did and the explained part reaches it (``end_id``, −1 for
    none)."""
    ids = [int(t) for t in row.input_ids[len(row.input_ids) - row.answer_length - row.prefix_length :]]
    return [*ids, int(row.end_id)] if end and int(row.end_id) >= 0 else ids
