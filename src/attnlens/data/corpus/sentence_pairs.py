"""The pairs of study 3: short texts of the two fields with graded similarity."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.data.corpus.phrases import (
    CARRIERS,
    CLASS_NAMES,
    EVIDENCE_PHRASES,
    filler_sentence,
)

#: Graded similarity of generated pairs: 2 = same field sharing an evidence phrase, 1 = same field
#: with disjoint phrases, 0 = different fields.
PAIR_GRADES = (0, 1, 2)


def _short_text(rng: np.random.Generator, phrases: list[str], n_filler: int) -> str:
    """Filler sentences with each phrase planted in a carrier sentence at a random position."""
    sentences = [filler_sentence(rng) for _ in range(n_filler)]
    for phrase in phrases:
        carrier = CARRIERS[rng.integers(len(CARRIERS))]
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
    if n_phrases < 1 or n_phrases > min(len(v) for v in EVIDENCE_PHRASES.values()) // 2:
        raise ValueError(f"n_phrases must be in [1, {min(len(v) for v in EVIDENCE_PHRASES.values()) // 2}]")
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n_pairs):
        grade = PAIR_GRADES[k % len(PAIR_GRADES)]
        field_a = int(rng.integers(2))
        field_b = field_a if grade else 1 - field_a
        pool_a = list(rng.permutation(len(EVIDENCE_PHRASES[field_a])))
        phrases_a = [EVIDENCE_PHRASES[field_a][i] for i in pool_a[:n_phrases]]
        if grade == 2:  # one phrase in common, the rest from the unused part of the field's list
            rest = [EVIDENCE_PHRASES[field_b][i] for i in pool_a[n_phrases : 2 * n_phrases - 1]]
            shared = phrases_a[int(rng.integers(n_phrases))]
            phrases_b = [shared, *rest]
        elif grade == 1:
            shared = None
            phrases_b = [EVIDENCE_PHRASES[field_b][i] for i in pool_a[n_phrases : 2 * n_phrases]]
        else:
            shared = None
            phrases_b = [
                EVIDENCE_PHRASES[field_b][i] for i in rng.permutation(len(EVIDENCE_PHRASES[field_b]))[:n_phrases]
            ]
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
