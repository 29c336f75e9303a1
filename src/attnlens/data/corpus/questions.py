"""The question-answering corpus: a question about a described system, its supporting sentence at one end of the
document, the answer's fact at the other, and distractor facts beside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    GENERATORS,
    SyntheticCorpus,
    filler_sentences,
)
from attnlens.tasks.qa import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING  # the kinds of a QA document's sentences

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
    """The question-answering documents as a generative task (:func:`generate_qa_corpus`): the label is the
    answer's text, which the model writes after the prompt."""
    corpus = generate_qa_corpus(cfg, seed)
    documents = corpus.documents.assign(label=[cell[0]["text"] for cell in corpus.documents["label"]])
    return SyntheticCorpus(documents, corpus.rationales, corpus.flipped, corpus.classes)


GENERATORS.register(generate_generation_corpus, "generation")
