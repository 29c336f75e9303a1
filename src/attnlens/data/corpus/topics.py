"""The multi-label corpus: four topic labels, each with its own phrases planted at set rates."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    GENERATORS,
    SyntheticCorpus,
    planted_document,
)

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


def generate_multilabel_corpus(cfg, seed: int) -> SyntheticCorpus:
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

        text, planted = planted_document(rng, fields, cfg, _TOPICS)
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


GENERATORS.register(generate_multilabel_corpus, "multilabel")
