"""The model-randomisation sanity check of explanation methods (Adebayo et al. 2018; Zafar et al. 2021, test ii).

An explanation that reflects what the model learned must change when the learned weights are destroyed. The
check explains the same examples with the trained classifier and with copies of it whose weights are drawn
anew, cascading from the top: the classification head alone (``head``), then the head and the top layer
(``top1``), the head and the top two layers (``top2``), … down to every transformer layer (``top<L>``). The
embeddings are kept, so a method that only echoes the input (its token identities or positions) keeps its
ranking: its Spearman ρ with the trained model's scores stays high. Rule ``findings`` flags a method whose
mean ρ at the full cascade stays above ``findings.sanity_max_rho``.

Beside each ρ, ``position``: the Spearman ρ of the randomised model's scores with the place of each token (a
classifier's) or source (a generated answer's). A method that keeps its ranking because it follows position — a
causal layer's key is attended by every query after it, so received attention falls with position whatever the
weights — says so there, and the findings state it.

The same check runs on a generated answer's sources (rule ``answer_sanity``): the cascade is the generator's, its
head the language-model head (left out where it is tied to the kept embeddings).

The cascade's levels and the agreement rows live here; drawing the weights anew is
:func:`attnlens.models.randomisation.randomise_top` (the model's side of the seam).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: The sanity artifact's schema id (rules sanity_check and answer_sanity).
SANITY_SCHEMA = "sanity_check/v2"
#: Its columns: one row per (example, method, level).
SANITY_COLUMNS = ["example_id", "method", "level", "layers", "spearman", "position"]
#: The cascade's first level: the classification head alone.
HEAD = "head"


def levels(n_layers: int, head: bool = True) -> list[str]:
    """The cascade: ``head``, then ``top1`` … ``top<n_layers>`` (the head and that many layers from the top);
    ``head=False``: a model whose head cannot be drawn alone (tied to the kept embeddings) starts at ``top1``."""
    return [*([HEAD] if head else []), *(f"top{k}" for k in range(1, n_layers + 1))]


def layers_of(level: str) -> int:
    """How many transformer layers (from the top) ``level`` randomises."""
    return 0 if level == HEAD else int(level.removeprefix("top"))


def rank_agreement(trained: np.ndarray, other: np.ndarray, content: np.ndarray) -> float:
    """Spearman ρ of the scores' magnitudes over the content tokens (NaN when either is constant there)."""
    from scipy.stats import spearmanr  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    a, b = np.abs(np.asarray(trained, dtype=float))[content], np.abs(np.asarray(other, dtype=float))[content]
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def position_agreement(scores: np.ndarray, content: np.ndarray) -> float:
    """Spearman ρ of the scores' magnitudes with their place (0, 1, …) over the content (NaN where constant)."""
    return rank_agreement(np.arange(len(content), dtype=float), scores, content)


def sanity_rows(
    example_id: str,
    trained: dict[str, np.ndarray],
    randomised_scores: dict[str, dict[str, np.ndarray]],
    content: np.ndarray,
    methods: Sequence[str],
) -> list[dict]:
    """One row per (level, method): the method's ρ between the trained model's scores and the level's, and the
    level's ρ with position."""
    rows = []
    for level, scores in randomised_scores.items():
        for method in methods:
            rows.append(
                {
                    "example_id": example_id,
                    "method": method,
                    "level": level,
                    "layers": layers_of(level),
                    "spearman": rank_agreement(trained[method], scores[method], content),
                    "position": position_agreement(scores[method], content),
                }
            )
    return rows
