"""The regression corpus: the classification corpus's documents, the target the count of one field's planted phrases."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    GENERATORS,
    SyntheticCorpus,
    planted_document,
)

#: The field whose planted phrases a regression document's target counts (A.I.; the other field's are distractors).
COUNTED_FIELD = 1


def generate_regression_corpus(cfg, seed: int) -> SyntheticCorpus:
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
        text, planted = planted_document(rng, lambda r, k=k: fields(r, k), cfg)
        rows.append((example_id, text, float(k + noise[i])))
        spans += [(example_id, p, s, e, pl, pl == COUNTED_FIELD) for p, s, e, pl in planted]
    documents = pd.DataFrame(rows, columns=["example_id", "text", "label"]).astype({"label": "float64"})
    rationales = pd.DataFrame(
        spans, columns=["example_id", "phrase", "char_start", "char_end", "phrase_label", "evidence"]
    ).astype({"char_start": "int64", "char_end": "int64", "phrase_label": "int64", "evidence": "bool"})
    return SyntheticCorpus(documents, rationales, (), ())


GENERATORS.register(generate_regression_corpus, "regression")
