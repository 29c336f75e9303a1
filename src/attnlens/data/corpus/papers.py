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

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    GENERATORS,
    SyntheticCorpus,
    planted_document,
)


def _class_evidence(rng: np.random.Generator, label: int, cfg) -> list[int]:
    """The fields of a classification document's planted phrases: ``k`` of its own class (``k`` drawn from
    ``[ceil(n_evidence / 2), n_evidence]``), then ``m`` of the other (``m`` from ``[0, n_distractors]``)."""
    k = int(rng.integers(math.ceil(cfg.n_evidence / 2), cfg.n_evidence + 1)) if cfg.n_evidence else 0
    m = int(rng.integers(0, cfg.n_distractors + 1))
    return [label] * k + [1 - label] * m


def generate_corpus(cfg, seed: int) -> SyntheticCorpus:
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
        text, planted = planted_document(rng, lambda r, label=label: _class_evidence(r, label, cfg), cfg)
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


GENERATORS.register(generate_corpus, "classification")
