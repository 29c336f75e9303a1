"""How a dataset's rows become examples (``data.layout``), as a registry: a layout reads a file's or a hub
dataset's own columns and writes one example a row in the columns the config names (``data.text_column``,
``data.label_column``, ``data.question_column``), with the rationales the dataset annotates.

* ``columns`` (the default) — the rows already are examples, in the configured columns.
* ``hotpot_qa`` — HotpotQA's distractor setting (Yang et al., 2018): a question, its answer, ten Wikipedia
  paragraphs (two hold the supporting facts, eight are distractors retrieved for the question), and the supporting
  facts as ``(title, sentence index)`` pairs. Read in the Hugging Face form (``context`` ``{title: [...],
  sentences: [[...], ...]}``, ``supporting_facts`` ``{title: [...], sent_id: [...]}``) or the original JSON's
  (``context`` ``[[title, [sentences]], ...]``, ``supporting_facts`` ``[[title, sent_id], ...]``). An example's
  context is its paragraphs, each its title on one line and its sentences as the dataset splits them, joined by a
  blank line. The answer is placed at its first occurrence in a supporting fact (else in the context); the
  supporting facts are the QA rationales (``QA_ANSWER`` for the fact the answer is placed in, ``QA_SUPPORTING``
  for the others), every sentence of a distractor paragraph a ``QA_DISTRACTOR``. A question answered yes or no,
  or whose answer the context does not contain, has no span for an extractive reader: it is left out and counted
  (:attr:`Laid.left_out`, the run notes); so is a supporting fact naming a sentence its paragraph does not have
  (a known flaw of a few HotpotQA rows). For ``data.task: generation`` (retrieval-augmented answering) the label
  is the answer's text, yes and no included, each titled paragraph is a source (``data.sources_column``, where the
  config names one), and the supporting facts are the planted evidence the generation study scores against.

Adding a layout: a :class:`Layout` subclass registered below, and its tests (``tests/unit/data/test_data_layouts.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.errors import InputError
from attnlens.registry import Registry
from attnlens.tasks.qa import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING


@dataclass(frozen=True)
class Columns:
    """The configured columns a layout writes: text, label, question (``data.<name>_column``)."""

    text: str
    label: str
    question: str
    sources: str | None = None  # data.sources_column: each context's own sources, where the task reads them
    task: str = "qa"


@dataclass(frozen=True)
class Laid:
    """A layout's result: the kept rows as examples (``frame``, indexed by their positions in the source), their
    rationales (``row`` is the position in ``frame``), and how many rows were left out, by reason."""

    frame: pd.DataFrame
    rationales: list[dict] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)


class Layout:
    """One dataset layout: its name, the tasks it serves (empty: every task) and :meth:`lay_out`."""

    name: str = ""
    tasks: tuple[str, ...] = ()
    description: str = ""

    def lay_out(self, df: pd.DataFrame, columns: Columns, where: str) -> Laid:
        """The examples of ``df`` (a file's or hub split's own rows) in ``columns``."""
        return Laid(df)


#: Every layout by name, in registration order (each registered below its class).
REGISTRY: Registry[Layout] = Registry("data layouts", "data.layout")
DEFAULT = "columns"
register = REGISTRY.register


def get_layout(name: str) -> Layout:
    """The layout ``name``; an unknown name is one line naming the registered ones."""
    return REGISTRY.get(name)


def layout_names() -> list[str]:
    return REGISTRY.names()


class RowsAreExamples(Layout):
    name = "columns"
    description = "one example a row, in the configured columns"


register(RowsAreExamples())


def _as_list(value) -> list:
    """A cell's sequence as a list, whether a JSON list, a tuple or a NumPy array (as pandas reads Arrow lists)."""
    if isinstance(value, np.ndarray | list | tuple):
        return list(value)
    raise TypeError(type(value).__name__)


class HotpotQA(Layout):
    name = "hotpot_qa"
    tasks = ("qa", "generation")
    description = "HotpotQA's distractor setting: ten titled paragraphs, supporting facts as rationales"
    #: the answers an extractive reader has no span for
    YES_NO = frozenset({"yes", "no"})

    def _paragraphs(self, cell, row: int, where: str) -> list[tuple[str, list[str]]]:
        try:
            if isinstance(cell, dict):
                pairs = zip(_as_list(cell["title"]), _as_list(cell["sentences"]), strict=True)
                return [(str(t), [str(s) for s in _as_list(ss)]) for t, ss in pairs]
            return [(str(t), [str(s) for s in _as_list(ss)]) for t, ss in _as_list(cell)]
        except (KeyError, TypeError, ValueError):
            raise InputError(
                where,
                "context",
                f"expected HotpotQA's paragraphs ({{'title': [...], 'sentences': "
                f"[[...], ...]}} or [[title, [sentences]], ...]), row {row + 1} has "
                f"{str(cell)[:120]!r}",
            ) from None

    def _facts(self, cell, row: int, where: str) -> list[tuple[str, int]]:
        try:
            if isinstance(cell, dict):
                return [
                    (str(t), int(k)) for t, k in zip(_as_list(cell["title"]), _as_list(cell["sent_id"]), strict=True)
                ]
            return [(str(t), int(k)) for t, k in _as_list(cell)]
        except (KeyError, TypeError, ValueError):
            raise InputError(
                where,
                "supporting_facts",
                f"expected HotpotQA's supporting facts ({{'title': [...], "
                f"'sent_id': [...]}} or [[title, sent_id], ...]), row {row + 1} has "
                f"{str(cell)[:120]!r}",
            ) from None

    def lay_out(self, df: pd.DataFrame, columns: Columns, where: str) -> Laid:
        for column in ("question", "answer", "context", "supporting_facts"):
            if column not in df.columns:
                raise InputError(
                    where,
                    column,
                    f"expected HotpotQA's column {column!r} (data.layout hotpot_qa); "
                    f"found {list(map(str, df.columns))}",
                )
        left_out: Counter = Counter()
        kept, texts, answers, rationales, paragraph_texts = [], [], [], [], []
        for row, (answer, context, facts) in enumerate(
            zip(df["answer"], df["context"], df["supporting_facts"], strict=True)
        ):
            paragraphs = self._paragraphs(context, row, where)
            pieces, spans, at = [], {}, 0  # spans: (paragraph, sentence) -> (start, end) in the joined text
            for p, (title, sentences) in enumerate(paragraphs):
                if p:
                    pieces.append("\n\n")
                    at += 2
                pieces.append(title + "\n")
                at += len(title) + 1
                for s, sentence in enumerate(sentences):
                    spans[p, s] = (at, at + len(sentence))
                    pieces.append(sentence)
                    at += len(sentence)
            text = "".join(pieces)
            titles = {title: p for p, (title, _) in reversed(list(enumerate(paragraphs)))}
            supporting = []
            for title, k in self._facts(facts, row, where):
                if (titles.get(title), k) in spans:
                    supporting.append((titles[title], k))
                else:
                    left_out["supporting facts naming a sentence their paragraph does not have (the fact dropped)"] += 1
            answer = str(answer) if answer is not None else ""
            generated = columns.task == "generation"
            if answer.strip().lower() in self.YES_NO and not generated:
                left_out["questions answered yes or no (no span to extract)"] += 1
                continue
            start, in_fact = -1, None
            for key in supporting:
                a, b = spans[key]
                found = text.find(answer, a, b) if answer else -1
                if found >= 0:
                    start, in_fact = found, key
                    break
            if start < 0 and answer:
                start = text.find(answer)
            if start < 0 and not generated:
                left_out["answers their context does not contain"] += 1
                continue
            if generated and not answer.strip():
                left_out["questions without an answer"] += 1
                continue
            position = len(kept)
            kept.append(row)
            texts.append(text)
            answers.append(answer if generated else {"text": [answer], "answer_start": [start]})
            paragraph_texts.append(self._paragraph_texts(text, spans, paragraphs))
            support_paragraphs = {p for p, _ in supporting}
            for key in supporting:
                kind = QA_ANSWER if key == in_fact else QA_SUPPORTING
                rationales.append(self._rationale(position, text, spans[key], kind))
            for (p, _), span in spans.items():
                if p not in support_paragraphs:
                    rationales.append(self._rationale(position, text, span, QA_DISTRACTOR))
        frame = df.iloc[kept].copy()
        frame.index = pd.Index(kept)  # the source's rows kept
        frame[columns.text] = texts
        frame[columns.label] = answers
        if columns.sources is not None:
            frame[columns.sources] = paragraph_texts
        if columns.question != "question":
            frame[columns.question] = frame["question"]
        return Laid(frame, rationales, dict(left_out))

    @staticmethod
    def _paragraph_texts(text: str, spans: dict, paragraphs: list) -> list[str]:
        """Each titled paragraph as a span of the joined context: its title line through its last sentence."""
        out, at = [], 0
        for p, (title, sentences) in enumerate(paragraphs):
            start = text.index(title + "\n", at)
            end = spans[p, len(sentences) - 1][1] if sentences else start + len(title)
            out.append(text[start:end])
            at = end
        return out

    @staticmethod
    def _rationale(row: int, text: str, span: tuple[int, int], kind: int) -> dict:
        a, b = span
        return {
            "row": row,
            "phrase": text[a:b],
            "char_start": a,
            "char_end": b,
            "phrase_label": kind,
            "evidence": kind != QA_DISTRACTOR,
        }


register(HotpotQA())


def source_name(source: str, path: str | None, hub_name: str | None) -> str:
    """What tables and figures call a dataset by default: the file's stem, the folder's name, the hub id."""
    if source == "file" and path:
        return Path(path).stem
    if source == "folders" and path:
        return Path(path).resolve().name
    if source == "hub" and hub_name:
        return hub_name
    return "synthetic papers"


def left_out_note(where: str, left_out: dict[str, int], layout: str) -> str | None:
    """The run note of the rows a layout left out, or ``None`` when it kept every row."""
    if not left_out:
        return None
    parts = "; ".join(f"{n} {reason}" for reason, n in sorted(left_out.items()))
    return f"{where} (data.layout {layout}): {parts}"


__all__: Sequence[str] = [
    "Columns",
    "Laid",
    "Layout",
    "get_layout",
    "layout_names",
    "left_out_note",
    "register",
    "source_name",
]
