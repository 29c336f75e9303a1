"""A deterministic generator of long two-class "synthetic papers" with known rationales.

The corpus stands in for the paper's arXiv cs.AI (label 1) vs cs.PL (label 0) long documents,
with one thing no real corpus gives: the character span of every phrase that carries class
evidence. Each document is academic filler shared by both classes (section headings, generic
methodology sentences) into which we plant

* ``k`` *evidence* phrases of the document's own field, ``k`` drawn from
  ``[ceil(n_evidence / 2), n_evidence]``, and
* ``m`` *distractor* phrases of the other field, ``m`` drawn from ``[0, n_distractors]``,

each inside a carrier sentence at a uniformly random sentence position. Documents run from
``min_words`` to ``max_words`` words, so most exceed the model's maximum length and are
truncated, as in the paper: evidence past the cut-off is invisible, and some documents show
more distractors than evidence, so the task is learnable but not trivial. With
``label_noise > 0`` that fraction of labels is flipped after generation (the spans keep the
field they were planted for, so a flipped document's evidence points to the other class).

Everything is a pure function of ``seed`` and the :class:`~attnlens.pipeline.config.SyntheticConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlens.pipeline.config import SyntheticConfig
from attnlens.registry import Registry
from attnlens.tasks.qa import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING  # the kinds of a QA document's sentences

#: Label → field name (label 1 = A.I., label 0 = Programming Languages, as in the paper).
CLASS_NAMES = ("programming_languages", "artificial_intelligence")

_EVIDENCE = {
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

_CARRIERS = (
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


def _filler_sentence(rng: np.random.Generator) -> str:
    s = _SUBJECTS[rng.integers(len(_SUBJECTS))]
    v = _VERBS[rng.integers(len(_VERBS))]
    o = _OBJECTS[rng.integers(len(_OBJECTS))]
    t = _TAILS[rng.integers(len(_TAILS))]
    return f"{s[0].upper()}{s[1:]} {v} {o}{t}."


def _filler_sentences(rng: np.random.Generator, cfg: SyntheticConfig) -> list[str]:
    """A document's filler: sentences until a length drawn from ``[min_words, max_words]`` is reached."""
    n_words = int(rng.integers(cfg.min_words, cfg.max_words + 1))
    sentences: list[str] = []
    words = 0
    while words < n_words:
        sentence = _filler_sentence(rng)
        sentences.append(sentence)
        words += sentence.count(" ") + 1
    return sentences


def _class_evidence(rng: np.random.Generator, label: int, cfg: SyntheticConfig) -> list[int]:
    """The fields of a classification document's planted phrases: ``k`` of its own class (``k`` drawn from
    ``[ceil(n_evidence / 2), n_evidence]``), then ``m`` of the other (``m`` from ``[0, n_distractors]``)."""
    k = int(rng.integers(math.ceil(cfg.n_evidence / 2), cfg.n_evidence + 1)) if cfg.n_evidence else 0
    m = int(rng.integers(0, cfg.n_distractors + 1))
    return [label] * k + [1 - label] * m


def _document(
    rng: np.random.Generator,
    fields: Callable[[np.random.Generator], list[int]],
    cfg: SyntheticConfig,
    pools: dict[int, tuple[str, ...]] = _EVIDENCE,
) -> tuple[str, list[tuple[str, int, int, int]]]:
    """One document and its planted phrases ``(phrase, start, end, phrase_label)``: filler sentences, then one
    phrase of each field ``fields(rng)`` lists (drawn from ``pools[field]``), each in a carrier sentence at a
    random slot."""
    sentences = _filler_sentences(rng, cfg)
    planted = fields(rng)
    # insertion slot (before sentence j) for each planted phrase; several may share a slot
    slots = rng.integers(0, len(sentences) + 1, size=len(planted))
    inserts: dict[int, list[tuple[int, str]]] = {}
    for plabel, slot in zip(planted, slots, strict=True):
        phrase = pools[plabel][rng.integers(len(pools[plabel]))]
        carrier = _CARRIERS[rng.integers(len(_CARRIERS))]
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


def generate_corpus(cfg: SyntheticConfig, seed: int) -> SyntheticCorpus:
    """Generate the corpus: balanced classes (label = index mod 2 before shuffling), ids ``syn00000``…

    Args:
        cfg: corpus size, lengths, planted-phrase counts and label noise.
        seed: the only source of randomness.

    Returns:
        The documents, their planted spans and the ids whose label was flipped.
    """
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(cfg.n_documents) % 2)
    rows, spans = [], []
    flipped = []
    noise = rng.random(cfg.n_documents) < cfg.label_noise
    for i, label in enumerate(labels.tolist()):
        example_id = f"syn{i:05d}"
        text, planted = _document(rng, lambda r, label=label: _class_evidence(r, label, cfg), cfg)
        final = 1 - label if noise[i] else label
        if noise[i]:
            flipped.append(example_id)
        rows.append((example_id, text, final))
        spans += [(example_id, p, s, e, pl, pl == final) for p, s, e, pl in planted]
    documents = pd.DataFrame(rows, columns=["example_id", "text", "label"])
    documents["label"] = documents["label"].astype("int64")
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, tuple(flipped))


#: The field whose planted phrases a regression document's target counts (A.I.; the other field's are distractors).
COUNTED_FIELD = 1


def generate_regression_corpus(cfg: SyntheticConfig, seed: int) -> SyntheticCorpus:
    """Documents whose target is a planted quantity: how many phrases of the A.I. field they contain.

    Document ``i`` gets ``k_i`` A.I. phrases, the counts ``0 … n_evidence`` spread evenly over the corpus (in a
    seeded order), and ``m`` programming-language phrases (``m`` drawn from ``[0, n_distractors]``) that the target
    ignores; its target is ``k_i`` plus Gaussian noise of standard deviation ``label_noise`` (in phrases). The
    rationales mark the counted phrases as evidence and the others as distractors, so a method's plausibility is
    measured as for the classification corpus; evidence past the model's length is invisible, as there.

    Returns:
        ``documents`` with a float64 ``label`` (the target), the rationales, and no flipped ids.
    """
    rng = np.random.default_rng(seed)
    counts = rng.permutation(np.arange(cfg.n_documents) % (cfg.n_evidence + 1))
    noise = rng.normal(0.0, cfg.label_noise, cfg.n_documents)
    rows, spans = [], []

    def fields(r: np.random.Generator, k: int) -> list[int]:
        return [COUNTED_FIELD] * k + [1 - COUNTED_FIELD] * int(r.integers(0, cfg.n_distractors + 1))

    for i, k in enumerate(counts.tolist()):
        example_id = f"syn{i:05d}"
        text, planted = _document(rng, lambda r, k=k: fields(r, k), cfg)
        rows.append((example_id, text, float(k + noise[i])))
        spans += [(example_id, p, s, e, pl, pl == COUNTED_FIELD) for p, s, e, pl in planted]
    documents = pd.DataFrame(rows, columns=["example_id", "text", "label"]).astype({"label": "float64"})
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, (), ())


#: The labels of the multi-label corpus, each with its own ten phrases (the two fields' lists, split by topic).
TOPIC_NAMES = ("machine_learning", "agents_and_reasoning", "types_and_semantics", "compilers_and_runtimes")
_TOPICS = {
    0: (
        "neural network",
        "gradient descent",
        "training data",
        "supervised learning",
        "backpropagation",
        "deep learning",
        "transfer learning",
        "convolutional layers",
        "feature extraction",
        "image classification",
    ),
    1: (
        "reinforcement learning",
        "reward function",
        "policy network",
        "planning agent",
        "knowledge graph",
        "bayesian inference",
        "language model",
        "attention mechanism",
        "adversarial examples",
        "classification accuracy",
    ),
    2: (
        "type system",
        "lambda calculus",
        "operational semantics",
        "program verification",
        "type inference",
        "denotational semantics",
        "dependent types",
        "refinement types",
        "memory safety",
        "pattern matching",
    ),
    3: (
        "compiler optimization",
        "abstract syntax tree",
        "garbage collection",
        "static analysis",
        "intermediate representation",
        "register allocation",
        "parser combinators",
        "concurrent programs",
        "source code",
        "functional programming",
    ),
}

#: ``CO_OCCURRENCE[a][b]``: the probability that a document whose first label is ``a`` also has label ``b``.
#: Topics of one field (0–1: A.I.; 2–3: programming languages) co-occur often, across fields rarely, so the labels'
#: evidence overlaps as real tags do (a paper on agents is often also on learning).
CO_OCCURRENCE = np.array(
    [
        [0.0, 0.5, 0.1, 0.1],
        [0.5, 0.0, 0.1, 0.1],
        [0.1, 0.1, 0.0, 0.5],
        [0.1, 0.1, 0.5, 0.0],
    ]
)


def generate_multilabel_corpus(cfg: SyntheticConfig, seed: int) -> SyntheticCorpus:
    """Documents with any of four topic labels, each label with its own planted evidence.

    Document ``i``'s first label is ``i mod 4`` (in a seeded order, so each label leads a quarter of the corpus);
    each other label joins with :data:`CO_OCCURRENCE`'s probability. Each label a document has gets ``k`` of its
    topic's phrases (``k`` drawn from ``[ceil(n_evidence / 2), n_evidence]``, at least one); then ``m`` distractor
    phrases (``m`` drawn from ``[0, n_distractors]``) of topics it does not have, one each, so a label is told by
    how much of its evidence a document holds, not by a single mention. With ``label_noise > 0`` each label of each
    document is flipped with that probability after generation; the rationales keep the topic each phrase was
    planted for, and mark it as evidence when the document's final labels include that topic.

    Returns:
        ``documents`` with ``label`` a 0/1 vector of the four labels, the rationales (``phrase_label``: the topic),
        the ids with a flipped label, and the label names.
    """
    rng = np.random.default_rng(seed)
    k_labels = len(TOPIC_NAMES)
    first = rng.permutation(np.arange(cfg.n_documents) % k_labels)
    rows, spans, flipped = [], [], []
    low = max(1, math.ceil(cfg.n_evidence / 2))
    for i, lead in enumerate(first.tolist()):
        example_id = f"syn{i:05d}"
        has = np.zeros(k_labels, dtype=np.int64)
        has[lead] = 1
        has |= (rng.random(k_labels) < CO_OCCURRENCE[lead]).astype(np.int64)

        def fields(r: np.random.Generator, has=has) -> list[int]:
            planted = [
                k
                for k in np.flatnonzero(has).tolist()
                for _ in range(int(r.integers(low, max(low, cfg.n_evidence) + 1)))
            ]
            absent = np.flatnonzero(has == 0)
            m = min(int(r.integers(0, cfg.n_distractors + 1)), len(absent))
            return planted + [int(k) for k in r.permutation(absent)[:m]]

        text, planted = _document(rng, fields, cfg, _TOPICS)
        flips = rng.random(k_labels) < cfg.label_noise
        final = np.where(flips, 1 - has, has)
        if flips.any():
            flipped.append(example_id)
        rows.append((example_id, text, final))
        spans += [(example_id, p, s, e, pl, bool(final[pl])) for p, s, e, pl in planted]
    documents = pd.DataFrame(rows, columns=["example_id", "text", "label"])
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, tuple(flipped), TOPIC_NAMES)


#: Question answering: invented systems (the entities), what the questions call them (a description a supporting
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


def generate_qa_corpus(cfg: SyntheticConfig, seed: int) -> SyntheticCorpus:
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
    does not apply (an answer is a span of the text, not a label to flip).

    Returns:
        ``documents`` with ``question`` and ``label``, the answers (``[{"text", "answer_start"}]``, one answer),
        beside ``example_id`` and ``text`` (the context), and the rationales: every planted sentence, ``phrase_label``
        :data:`QA_ANSWER`, :data:`QA_SUPPORTING` or :data:`QA_DISTRACTOR`, ``evidence`` for the first two.
    """
    rng = np.random.default_rng(seed)
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
        near, far = ("first", "last") if rng.random() < 0.5 else ("last", "first")
        planted = [
            (QA_SUPPORTING, QA_SUPPORT.format(d=described[0], e=target), near),
            (QA_ANSWER, fact.format(e=target, a=answer), far),
        ]
        for k in range(int(rng.integers(1, max(1, cfg.n_distractors) + 1))):
            other = str(entities[1 + k])
            # the first distractors sit where the answer's fact and the supporting sentence do: no position tells
            planted.append((QA_DISTRACTOR, fact.format(e=other, a=str(values[1 + k])), far if k == 0 else "any"))
            if k < 2:
                planted.append(
                    (QA_DISTRACTOR, QA_SUPPORT.format(d=described[1 + k], e=other), near if k == 0 else "any")
                )
        text, placed = _qa_document(rng, planted, cfg)
        start = text.index(answer, placed[1][1])  # the answer inside its fact sentence
        rows.append(
            (example_id, question.format(d=f"the {described[0]}"), text, [{"text": answer, "answer_start": start}])
        )
        spans += [
            (example_id, sentence, a, b, kind, kind != QA_DISTRACTOR)
            for kind, (sentence, a, b) in zip([k for k, _, _ in planted], placed, strict=True)
        ]
    documents = pd.DataFrame(rows, columns=["example_id", "question", "text", "label"])
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, (), ())


def _qa_document(
    rng: np.random.Generator, planted: list[tuple[int, str, str]], cfg: SyntheticConfig
) -> tuple[str, list[tuple[str, int, int]]]:
    """Filler sentences with ``planted`` ``(kind, sentence, where)`` inserted: ``where`` is ``first`` (the first
    sixth of the sentences), ``last`` (the last sixth) or ``any``; returns the text and each planted sentence's
    ``(sentence, char_start, char_end)``, in ``planted``'s order."""
    sentences = _filler_sentences(rng, cfg)
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


#: The generator of each task's synthetic corpus (its name is the task's, :mod:`attnlens.tasks`).
GENERATORS: Registry[Callable[[SyntheticConfig, int], SyntheticCorpus]] = Registry("corpus generators", "data.task")
GENERATORS.register(generate_corpus, "classification")
GENERATORS.register(generate_regression_corpus, "regression")
GENERATORS.register(generate_multilabel_corpus, "multilabel")
GENERATORS.register(generate_qa_corpus, "qa")


#: Graded similarity of generated pairs: 2 = same field sharing an evidence phrase, 1 = same field
#: with disjoint phrases, 0 = different fields.
PAIR_GRADES = (0, 1, 2)


def _short_text(rng: np.random.Generator, phrases: list[str], n_filler: int) -> str:
    """Filler sentences with each phrase planted in a carrier sentence at a random position."""
    sentences = [_filler_sentence(rng) for _ in range(n_filler)]
    for phrase in phrases:
        carrier = _CARRIERS[rng.integers(len(_CARRIERS))]
        sentences.insert(int(rng.integers(0, len(sentences) + 1)), carrier.format(p=phrase))
    return " ".join(sentences)


def generate_pairs(n_pairs: int, seed: int, n_filler: int = 1, n_phrases: int = 2) -> pd.DataFrame:
    """Short text pairs with a known graded similarity, for Siamese-encoder attribution (study 3).

    Pairs cycle through the grades (balanced): grade 2 — both texts of one field, sharing one
    evidence phrase (the other phrases differ); grade 1 — one field, no phrase in common; grade 0 —
    different fields. Each text is ``n_filler`` shared-vocabulary filler sentences plus ``n_phrases``
    evidence phrases in carrier sentences. ``score = grade / 2``.

    Returns:
        ``pair_id, text_a, text_b, grade, score, field_a, field_b, shared_phrase``.
    """
    if n_phrases < 1 or n_phrases > min(len(v) for v in _EVIDENCE.values()) // 2:
        raise ValueError(f"n_phrases must be in [1, {min(len(v) for v in _EVIDENCE.values()) // 2}]")
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n_pairs):
        grade = PAIR_GRADES[k % len(PAIR_GRADES)]
        field_a = int(rng.integers(2))
        field_b = field_a if grade else 1 - field_a
        pool_a = list(rng.permutation(len(_EVIDENCE[field_a])))
        phrases_a = [_EVIDENCE[field_a][i] for i in pool_a[:n_phrases]]
        if grade == 2:  # one phrase in common, the rest from the unused part of the field's list
            rest = [_EVIDENCE[field_b][i] for i in pool_a[n_phrases : 2 * n_phrases - 1]]
            shared = phrases_a[int(rng.integers(n_phrases))]
            phrases_b = [shared, *rest]
        elif grade == 1:
            shared = None
            phrases_b = [_EVIDENCE[field_b][i] for i in pool_a[n_phrases : 2 * n_phrases]]
        else:
            shared = None
            phrases_b = [_EVIDENCE[field_b][i] for i in rng.permutation(len(_EVIDENCE[field_b]))[:n_phrases]]
        rows.append(
            {
                "pair_id": f"pair{k:04d}",
                "text_a": _short_text(rng, phrases_a, n_filler),
                "text_b": _short_text(rng, phrases_b, n_filler),
                "grade": grade,
                "score": grade / 2,
                "field_a": CLASS_NAMES[field_a],
                "field_b": CLASS_NAMES[field_b],
                "shared_phrase": shared,
            }
        )
    return pd.DataFrame(rows)
