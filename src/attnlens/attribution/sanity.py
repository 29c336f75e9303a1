"""The model-randomisation sanity check of explanation methods (Adebayo et al. 2018; Zafar et al. 2021, test ii).

An explanation that reflects what the model learned must change when the learned weights are destroyed. The
check explains the same examples with the trained classifier and with copies of it whose weights are drawn
anew, cascading from the top: the classification head alone (``head``), then the head and the top layer
(``top1``), the head and the top two layers (``top2``), … down to every transformer layer (``top<L>``). The
embeddings are kept, so a method that only echoes the input (its token identities or positions) keeps its
ranking: its Spearman ρ with the trained model's scores stays high. Rule ``findings`` flags a method whose
mean ρ at the full cascade stays above ``findings.sanity_max_rho``.

The cascade's levels and the agreement rows live here; drawing the weights anew is
:func:`attnlens.models.randomisation.randomise_top` (the model's side of the seam).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: The sanity artifact's schema id (rule sanity_check).
SANITY_SCHEMA = "sanity_check/v1"
#: The cascade's first level: the classification head alone.
HEAD = "head"


def levels(n_layers: int) -> list[str]:
    """The cascade: ``head``, then ``top1`` … ``top<n_layers>`` (the head and that many layers from the top)."""
    return [HEAD, *(f"top{k}" for k in range(1, n_layers + 1))]


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


def sanity_rows(
    example_id: str,
    trained: dict[str, np.ndarray],
    randomised_scores: dict[str, dict[str, np.ndarray]],
    content: np.ndarray,
    methods: Sequence[str],
) -> list[dict]:
    """One row per (level, method): the method's ρ between the trained model's scores and the level's."""
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
                }
            )
    return rows
