"""The run's figures (PNG + PDF, 1-based layer and head labels), one module a study: :mod:`~.canvas` (matplotlib's
headless set-up, saving with provenance, a figure a rule could not draw), :mod:`~.attention_figures` (heat-maps,
head importance and agreement, top-k counts), :mod:`~.similarity_figures` (Tables 1–4's distributions, per-target
agreement), :mod:`~.explanations_figures` (faithfulness curves, the leaderboard), :mod:`~.topology_figures` and
:mod:`~.pairs_figures`.

The layers × heads grid of binned attention is drawn as one mosaic image rather than 144 sub-plots, so a 12 × 12
grid of 128 × 128 images renders in about a second.
"""

from __future__ import annotations

# isort: split
# base first: it sets matplotlib's backend before any module draws
from attnlens.render.figures.canvas import SCALES, figure_metadata, plot_skipped, save_figure

# isort: split
from attnlens.render.figures.attention_figures import (
    plot_attention_grid,
    plot_head_agreement,
    plot_head_importance,
    plot_intersections,
    plot_token_occurrences,
    plot_topk_counts,
    scale_per_head,
)
from attnlens.render.figures.explanations_figures import plot_faithfulness_curves, plot_leaderboard
from attnlens.render.figures.pairs_figures import plot_pair_convergence, plot_pair_matrix, plot_pair_topology
from attnlens.render.figures.similarity_figures import plot_similarity_distributions, plot_target_agreement
from attnlens.render.figures.topology_figures import plot_distance_matrix, plot_persistence

__all__ = [
    "SCALES",
    "figure_metadata",
    "plot_attention_grid",
    "plot_distance_matrix",
    "plot_faithfulness_curves",
    "plot_head_agreement",
    "plot_head_importance",
    "plot_intersections",
    "plot_leaderboard",
    "plot_pair_convergence",
    "plot_pair_matrix",
    "plot_pair_topology",
    "plot_persistence",
    "plot_similarity_distributions",
    "plot_skipped",
    "plot_target_agreement",
    "plot_token_occurrences",
    "plot_topk_counts",
    "save_figure",
    "scale_per_head",
]
