"""The question-answering corpus: a question about a described system, its supporting sentence at one end of the
document, the answer's fact at the other, and distractor facts beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    GENERATORS,
    SyntheticCorpus,
    filler_sentence,
    filler_sentences,
)
from attnlens.registry import Registry
from attnlens.tasks.qa import QA_ANSWER, QA_CONFLICTING, QA_DISTRACTOR, QA_SUPPORTING  # a QA document's sentences

#: sentence resolves to one entity), and the relations a question asks about, with the answers each can have.
QA_ENTITIES = (
    "Falcon",
    "Heron",
    "Osprey",
    "Kestrel",
    "Merlin",
    "Plover",
    "Wren",
    "Finch",
    "Tern",
    "Ibis",
    "Egret",
    "Avocet",
)
QA_THINGS = ("compiler", "scheduler", "theorem prover", "type checker", "parser generator", "garbage collector")
QA_PLACES = ("Lund", "Delft", "Turku", "Brno", "Graz", "Aarhus", "Leiden", "Uppsala")
QA_RELATIONS = {
    # relation: (question, fact sentence, answers)
    "designer": (
        "Who designed {d}?",
        "{e} was designed by {a}.",
        (
            "Ada Byrne",
            "Otto Lind",
            "Mira Kovac",
            "Jonas Ek",
            "Lena Moll",
            "Ivo Petrak",
            "Sara Holm",
            "Tomas Berg",
            "Nina Roth",
            "Karl Vos",
        ),
    ),
    "year": (
        "When was {d} first released?",
        "{e} was first released in {a}.",
        tuple(str(y) for y in range(1971, 2020, 3)),
    ),
    "language": (
        "Which language is {d} written in?",
        "{e} is written in {a}.",
        ("OCaml", "Haskell", "Rust", "Scheme", "Prolog", "Fortran", "Smalltalk", "Erlang", "Ada", "Lisp"),
    ),
}
#: The supporting sentence that says which entity a description names.
QA_SUPPORT = "The {d} is known as {e}."
#: Each relation's fact said another way: the second sentence of a ``redundant`` context.
QA_PARAPHRASES = {
    "designer": "{a} is the designer of {e}.",
    "year": "The first release of {e} came out in {a}.",
    "language": "The source code of {e} is in {a}.",
}


def generate_qa_corpus(cfg, seed: int) -> SyntheticCorpus:
    """Question-answering documents whose answer needs a sentence far from it.

    Each document is filler (as the classification corpus's) with planted sentences. The question asks about a
    system by a description (*"Who designed the compiler used at the Lund lab?"*); a **supporting** sentence in one
    end sixth of the document says which system that is (*"The compiler used at the Lund lab is known as Falcon."*),
    and the **answer's** sentence in the other end sixth states the fact (*"Falcon was designed by Ada Byrne."*),
    which end each is drawn per document: the two are most of the document apart, further than a sliding window
    reaches, so only a path through the global question tokens (or the layers' stacking) joins them. ``m``
    **distractors** (``m`` drawn from ``[1, max(1, n_distractors)]``): the same relation's fact about another system
    and another description's supporting sentence, the first of each in the sixth of the answer's fact and of the
    supporting sentence, so that neither position nor relation tells the answer; the rest anywhere. ``label_noise``
    does not apply (an answer is a span of the text, not a label to flip). With ``cfg.hops`` 1 the question names
    the system itself (*"Who designed Falcon?"*): the supporting sentence is still planted, but is no evidence. With
    ``cfg.distractor_relation`` ``other`` the distractor facts state other relations (*"Heron is written in Rust."*),
    so the asked relation alone tells the answer's sentence.

    Returns:
        ``documents`` with ``question`` and ``label``, the answers (``[{"text", "answer_start"}]``, one answer),
        beside ``example_id`` and ``text`` (the context), and the rationales: every planted sentence, ``phrase_label``
        :data:`QA_ANSWER`, :data:`QA_SUPPORTING` or :data:`QA_DISTRACTOR`, ``evidence`` for the answer's and (two
        hops) the supporting sentence.
    """
    rng = np.random.default_rng(seed)
    hops = getattr(cfg, "hops", 2)
    same_relation = getattr(cfg, "distractor_relation", "same") == "same"
    relations = list(QA_RELATIONS)
    rows, spans = [], []
    for i in range(cfg.n_documents):
        example_id = f"syn{i:05d}"
        relation = relations[i % len(relations)]
        question, fact, answers = QA_RELATIONS[relation]
        entities = rng.permutation(QA_ENTITIES)
        things, places = rng.permutation(QA_THINGS), rng.permutation(QA_PLACES)
        described = [f"{things[k]} used at the {places[k]} lab" for k in range(3)]
        values = rng.permutation(answers)
        target, answer = str(entities[0]), str(values[0])
        asked = f"the {described[0]}" if hops == 2 else target
        near, far = ("first", "last") if rng.random() < 0.5 else ("last", "first")
        planted = [
            (QA_SUPPORTING, QA_SUPPORT.format(d=described[0], e=target), near),
            (QA_ANSWER, fact.format(e=target, a=answer), far),
        ]
        for k in range(int(rng.integers(1, max(1, cfg.n_distractors) + 1))):
            other = str(entities[1 + k])
            if same_relation:
                distractor = fact.format(e=other, a=str(values[1 + k]))
            else:  # another relation's fact: the asked relation alone tells the answer's sentence
                others = [r for r in relations if r != relation]
                _, other_fact, other_values = QA_RELATIONS[others[k % len(others)]]
                distractor = other_fact.format(e=other, a=str(rng.choice(other_values)))
            # the first distractors sit where the answer's fact and the supporting sentence do: no position tells
            planted.append((QA_DISTRACTOR, distractor, far if k == 0 else "any"))
            if k < 2:
                planted.append(
                    (QA_DISTRACTOR, QA_SUPPORT.format(d=described[1 + k], e=other), near if k == 0 else "any")
                )
        text, placed = _qa_document(rng, planted, cfg)
        start = text.index(answer, placed[1][1])  # the answer inside its fact sentence
        rows.append((example_id, question.format(d=asked), text, [{"text": answer, "answer_start": start}]))
        spans += [
            (example_id, sentence, a, b, kind, kind == QA_ANSWER or (kind == QA_SUPPORTING and hops == 2))
            for kind, (sentence, a, b) in zip([k for k, _, _ in planted], placed, strict=True)
        ]
    documents = pd.DataFrame(rows, columns=["example_id", "question", "text", "label"])
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, (), ())


def _qa_document(
    rng: np.random.Generator, planted: list[tuple[int, str, str]], cfg
) -> tuple[str, list[tuple[str, int, int]]]:
    """Filler sentences with ``planted`` ``(kind, sentence, where)`` inserted: ``where`` is ``first`` (the first
    sixth of the sentences), ``last`` (the last sixth) or ``any``; returns the text and each planted sentence's
    ``(sentence, char_start, char_end)``, in ``planted``'s order."""
    sentences = filler_sentences(rng, cfg)
    n = len(sentences)
    sixth = max(1, n // 6)
    ranges = {"first": (0, sixth), "last": (n - sixth + 1, n + 1), "any": (0, n + 1)}
    slots = [int(rng.integers(*ranges[where])) for _, _, where in planted]
    ties = rng.permutation(len(planted))  # sentences of one slot in a drawn order: no place in it tells the answer
    order = sorted(range(len(planted)), key=lambda k: (slots[k], ties[k]))
    parts, placed, pos, k = [], [None] * len(planted), 0, 0
    for j in range(n + 1):
        while k < len(order) and slots[order[k]] == j:
            sentence = planted[order[k]][1]
            pos += 1 if parts else 0
            placed[order[k]] = (sentence, pos, pos + len(sentence))
            parts.append(sentence)
            pos += len(sentence)
            k += 1
        if j < n:
            pos += 1 if parts else 0
            parts.append(sentences[j])
            pos += len(sentences[j])
    return " ".join(parts), placed


GENERATORS.register(generate_qa_corpus, "qa")


def generate_generation_corpus(cfg, seed: int) -> SyntheticCorpus:
    """The question-answering documents as a generative task: the label is the answer's text, which the model writes
    after the prompt. Without ``cfg.structures``, :func:`generate_qa_corpus`'s documents; with it, contexts of planted
    structures (:func:`generate_structured_corpus`)."""
    if getattr(cfg, "structures", None):
        return generate_structured_corpus(cfg, seed)
    corpus = generate_qa_corpus(cfg, seed)
    documents = corpus.documents.assign(label=[cell[0]["text"] for cell in corpus.documents["label"]])
    return SyntheticCorpus(documents, corpus.rationales, corpus.flipped, corpus.classes)


@dataclass(frozen=True)
class Planted:
    """A context's planted structure: its question, its reference answer, its planted sentences ``(kind, sentence,
    evidence)``, and whether the question names the entity by a description (its distractors then include another
    description's supporting sentence)."""

    question: str
    answer: str
    sentences: list[tuple[int, str, bool]]
    described: bool = False


#: What an answer rests on, by name (``data.synthetic.structures``): each maps ``(rng, relation, entities, values,
#: descriptions)`` to the :class:`Planted` sentences of one context, before its distractors and filler.
STRUCTURES: Registry[Callable[..., Planted]] = Registry("planted structures", "data.synthetic.structures")


@STRUCTURES.register("single")
def single(rng, relation, entities, values, descriptions) -> Planted:
    """One sentence states the answer."""
    question, fact, _ = QA_RELATIONS[relation]
    e, a = entities[0], values[0]
    return Planted(question.format(d=e), a, [(QA_ANSWER, fact.format(e=e, a=a), True)])


@STRUCTURES.register("redundant")
def redundant(rng, relation, entities, values, descriptions) -> Planted:
    """Two sentences state the answer, in other words: removing either leaves the other, so leave-one-out sees
    neither."""
    question, fact, _ = QA_RELATIONS[relation]
    e, a = entities[0], values[0]
    twice = [(QA_ANSWER, fact.format(e=e, a=a), True), (QA_ANSWER, QA_PARAPHRASES[relation].format(e=e, a=a), True)]
    return Planted(question.format(d=e), a, twice)


@STRUCTURES.register("conjunctive")
def conjunctive(rng, relation, entities, values, descriptions) -> Planted:
    """Two hops: the question names a description, one sentence says which entity it is, another gives that entity's
    answer; the answer needs both."""
    question, fact, _ = QA_RELATIONS[relation]
    e, a, d = entities[0], values[0], descriptions[0]
    hops = [(QA_SUPPORTING, QA_SUPPORT.format(d=d, e=e), True), (QA_ANSWER, fact.format(e=e, a=a), True)]
    return Planted(question.format(d=f"the {d}"), a, hops, described=True)


@STRUCTURES.register("conflicting")
def conflicting(rng, relation, entities, values, descriptions) -> Planted:
    """Two sentences disagree about the asked entity: which one the answer follows is read from the answer (the
    reference is the first value; a response marks as planted the sentence whose value it names)."""
    question, fact, _ = QA_RELATIONS[relation]
    e = entities[0]
    both = [
        (QA_CONFLICTING, fact.format(e=e, a=values[0]), True),
        (QA_CONFLICTING, fact.format(e=e, a=values[1]), True),
    ]
    return Planted(question.format(d=e), values[0], both)


def generate_structured_corpus(cfg, seed: int) -> SyntheticCorpus:
    """Generation contexts of planted structures (:data:`STRUCTURES`), document ``i`` of ``cfg.structures[i mod
    k]``: a question about one entity (or, conjunctive, a description of it), the structure's sentences, up to
    ``cfg.n_distractors`` facts of the same relation about other entities (and, conjunctive, another description's
    supporting sentence), and filler sentences, ``cfg.n_sentences`` sentences in all (a count drawn in the range).
    Every planted sentence takes a slot drawn uniformly among the context's sentences, so across documents the
    evidence sits at every position. Each document's ``structure`` is a column beside ``example_id`` and its
    ``question``; the rationales are every planted sentence, ``evidence`` for the structure's own."""
    rng = np.random.default_rng(seed)
    relations = list(QA_RELATIONS)
    lo, hi = cfg.n_sentences
    rows, spans = [], []
    for i in range(cfg.n_documents):
        example_id = f"syn{i:05d}"
        structure = cfg.structures[i % len(cfg.structures)]
        relation = relations[(i // len(cfg.structures)) % len(relations)]
        _, fact, answers = QA_RELATIONS[relation]
        entities = [str(x) for x in rng.permutation(QA_ENTITIES)]
        values = [str(x) for x in rng.permutation(answers)]
        things, places = rng.permutation(QA_THINGS), rng.permutation(QA_PLACES)
        descriptions = [f"{things[k]} used at the {places[k]} lab" for k in range(3)]
        planted = STRUCTURES.get(structure)(rng, relation, entities, values, descriptions)
        sentences = list(planted.sentences)
        for k in range(int(rng.integers(0, cfg.n_distractors + 1))):
            other = entities[1 + k]
            sentences.append((QA_DISTRACTOR, fact.format(e=other, a=values[2 + k]), False))
            if planted.described and k == 0:
                sentences.append((QA_DISTRACTOR, QA_SUPPORT.format(d=descriptions[1], e=other), False))
        n = max(int(rng.integers(lo, hi + 1)), len(sentences))
        slots = rng.permutation(n)[: len(sentences)]  # a distinct position each, uniform over the context
        filler = iter(filler_sentence(rng) for _ in range(n - len(sentences)))
        at = dict(zip(slots.tolist(), range(len(sentences)), strict=True))
        parts, pos = [], 0
        for j in range(n):
            text = sentences[at[j]][1] if j in at else next(filler)
            if j in at:
                kind, _, evidence = sentences[at[j]]
                spans.append((example_id, text, pos, pos + len(text), kind, evidence))
            parts.append(text)
            pos += len(text) + 1
        rows.append((example_id, planted.question, " ".join(parts), planted.answer, structure))
    documents = pd.DataFrame(rows, columns=["example_id", "question", "text", "label", "structure"])
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, (), ())


GENERATORS.register(generate_generation_corpus, "generation")
