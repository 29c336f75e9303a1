"""Rules of ``workflow/rules/report.smk``, one module a study: the run's result tables and figures drawn from the
analyses' tables, and ``results/manifest.json``. :mod:`~.attributions_report` (IG's tables and overlays),
:mod:`~.explanations_report` (the leaderboard, the faithfulness figure and AOPC tables), :mod:`~.similarity_report`
(Tables 1–4 and their figures), :mod:`~.topology_report` (the persistence diagrams' figures), :mod:`~.pairs_report`
(the pair attributions' tables and figures), :mod:`~.generation_report` (the answers' leaderboard and explorer) and
:mod:`~.manifest_report`.

Light jobs: nothing here loads torch, transformers or a model; the tokenizer is read as a
:class:`~attnlens.data.tokens.Vocabulary` (``tests/project/test_startup.py``).
"""

from __future__ import annotations

from attnlens.stages.report.attributions_report import run_attribution_overlays, run_attribution_tables
from attnlens.stages.report.explanations_report import run_explanation_leaderboard, run_plot_faithfulness
from attnlens.stages.report.generation_report import run_answer_explorer, run_answer_leaderboard
from attnlens.stages.report.manifest_report import run_manifest
from attnlens.stages.report.pairs_report import run_pair_tables, run_plot_pairs
from attnlens.stages.report.similarity_report import run_aggregate_similarity, run_plot_similarity
from attnlens.stages.report.topology_report import run_plot_topology

__all__ = [
    "run_aggregate_similarity",
    "run_answer_explorer",
    "run_answer_leaderboard",
    "run_attribution_overlays",
    "run_attribution_tables",
    "run_explanation_leaderboard",
    "run_manifest",
    "run_pair_tables",
    "run_plot_faithfulness",
    "run_plot_pairs",
    "run_plot_similarity",
    "run_plot_topology",
]
