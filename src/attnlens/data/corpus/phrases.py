"""What every generated corpus shares: the two fields' evidence phrases, the academic filler, one document with
phrases planted at random sentence positions, :class:`SyntheticCorpus`, and the registry of each task's generator.

A ``cfg`` is the ``data.synthetic`` config section as the stage builds it
(:class:`~attnlens.pipeline.config.SyntheticConfig`): the numerics take it as data and never import the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlens.registry import Registry

#: Label → field name (label 1 = A.I., label 0 = Programming Languages, as in the paper).
CLASS_NAMES = ("programming_languages", "artificial_intelligence")

EVIDENCE_PHRASES = {
    1: (
        "neural network",
        "reinforcement learning",
        "gradient descent",
        "training data",
        "supervised learning",
        "image classification",
        "language model",
        "reward function",
        "convolutional layers",
        "backpropagation",
        "policy network",
        "deep learning",
        "feature extraction",
        "attention mechanism",
        "adversarial examples",
        "knowledge graph",
        "planning agent",
        "bayesian inference",
        "transfer learning",
        "classification accuracy",
    ),
    0: (
        "type system",
        "lambda calculus",
        "compiler optimization",
        "operational semantics",
        "abstract syntax tree",
        "garbage collection",
        "program verification",
        "type inference",
        "static analysis",
        "functional programming",
        "denotational semantics",
        "pattern matching",
        "memory safety",
        "intermediate representation",
        "register allocation",
        "dependent types",
        "parser combinators",
        "refinement types",
        "concurrent programs",
        "source code",
    ),
}

CARRIERS = (
    "We rely on {p} throughout this part of the work.",
    "A central ingredient here is {p}.",
    "Our approach builds directly on {p}.",
    "The results depend strongly on {p}.",
    "Earlier work on {p} motivates this design.",
    "This section studies {p} in more detail.",
    "In practice, {p} turned out to be decisive.",
    "We compare several variants of {p}.",
)

_HEADINGS = (
    "Abstract",
    "Introduction",
    "Related Work",
    "Background",
    "Method",
    "Experimental Setup",
    "Results",
    "Discussion",
    "Limitations",
    "Conclusion",
)

_SUBJECTS = (
    "the proposed approach",
    "this framework",
    "our analysis",
    "the evaluation",
    "the baseline",
    "the present study",
    "the second experiment",
    "this formulation",
    "the main theorem",
    "the prototype",
    "the benchmark suite",
    "each component",
)
_VERBS = (
    "improves",
    "extends",
    "clarifies",
    "simplifies",
    "generalises",
    "relies on",
    "reduces",
    "supports",
    "measures",
    "outlines",
    "motivates",
    "reconsiders",
)
_OBJECTS = (
    "the overall cost",
    "a number of earlier results",
    "the central assumption",
    "the experimental protocol",
    "several open questions",
    "the notation used below",
    "a simple but general model",
    "the complexity of the problem",
    "the main limitations",
    "the reported measurements",
    "a set of standard examples",
    "the underlying structure",
)
_TAILS = (
    "",
    " in a principled way",
    " under mild conditions",
    " for the cases we consider",
    " as discussed in the previous section",
    " with little additional effort",
    " compared to prior work",
    " on all inputs we tried",
)


@dataclass(frozen=True)
class SyntheticCorpus:
    """Documents and their planted phrases.

    Attributes:
        documents: ``example_id, text, label`` (one row per document, ``label`` after noise).
        rationales: ``example_id, phrase, char_start, char_end, phrase_label, evidence`` — one row
            per planted phrase; ``text[char_start:char_end] == phrase``; ``evidence`` is True when
            the phrase's field equals the document's (final) label.
        flipped: ids whose label was flipped by label noise.
        classes: the class names in label order (none for a regression corpus).
    """

    documents: pd.DataFrame
    rationales: pd.DataFrame
    flipped: tuple[str, ...]
    classes: tuple[str, ...] = CLASS_NAMES


def filler_sentence(rng: np.random.Generator) -> str:
    s = _SUBJECTS[rng.integers(len(_SUBJECTS))]
    v = _VERBS[rng.integers(len(_VERBS))]
    o = _OBJECTS[rng.integers(len(_OBJECTS))]
    t = _TAILS[rng.integers(len(_TAILS))]
    return f"{s[0].upper()}{s[1:]} {v} {o}{t}."


def filler_sentences(rng: np.random.Generator, cfg) -> list[str]:
    """A document's filler: sentences until a length drawn from ``[min_words, max_words]`` is reached."""
    n_words = int(rng.integers(cfg.min_words, cfg.max_words + 1))
    sentences: list[str] = []
    words = 0
    while words < n_words:
        sentence = filler_sentence(rng)
        sentences.append(sentence)
        words += sentence.count(" ") + 1
    return sentences


def planted_document(
    rng: np.random.Generator,
    fields: Callable[[np.random.Generator], list[int]],
    cfg,
    pools: dict[int, tuple[str, ...]] = EVIDENCE_PHRASES,
) -> tuple[str, list[tuple[str, int, int, int]]]:
    """One document and its planted phrases ``(phrase, start, end, phrase_label)``: filler sentences, then one
    phrase of each field ``fields(rng)`` lists (drawn from ``pools[field]``), each in a carrier sentence at a
    random slot."""
    sentences = filler_sentences(rng, cfg)
    planted = fields(rng)
    # insertion slot (before sentence j) for each planted phrase; several may share a slot
    slots = rng.integers(0, len(sentences) + 1, size=len(planted))
    inserts: dict[int, list[tuple[int, str]]] = {}
    for plabel, slot in zip(planted, slots, strict=True):
        phrase = pools[plabel][rng.integers(len(pools[plabel]))]
        carrier = CARRIERS[rng.integers(len(CARRIERS))]
        inserts.setdefault(int(slot), []).append((plabel, carrier.format(p=phrase) + "\x00" + phrase))
    n_sections = min(len(_HEADINGS), max(3, len(sentences) // 12))
    section_at = set(np.linspace(0, len(sentences), n_sections, endpoint=False).astype(int).tolist())
    parts: list[str] = []
    spans: list[tuple[str, int, int, int]] = []
    pos = 0
    heading = 0

    def emit(text: str, sep: str) -> int:
        nonlocal pos
        if parts:
            parts.append(sep)
            pos += len(sep)
        parts.append(text)
        start = pos
        pos += len(text)
        return start

    for j in range(len(sentences) + 1):
        for plabel, packed in inserts.get(j, []):
            sentence, phrase = packed.split("\x00")
            start = emit(sentence, " ") + sentence.index(phrase)
            spans.append((phrase, start, start + len(phrase), plabel))
        if j == len(sentences):
            break
        if j in section_at:
            emit(f"{heading + 1} {_HEADINGS[heading]}", "\n\n" if parts else "")
            heading += 1
            emit(sentences[j], "\n")
        else:
            emit(sentences[j], " ")
    return "".join(parts), spans


#: The generator of each task's synthetic corpus (its name is the task's, :mod:`attnlens.tasks`).
GENERATORS: Registry[Callable[..., SyntheticCorpus]] = Registry("corpus generators", "data.task")
