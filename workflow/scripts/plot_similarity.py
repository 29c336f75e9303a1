"""Snakemake adapter for rule plot_similarity."""

from pathlib import Path

from attnlens.config import FiguresConfig, SimilarityConfig
from attnlens.runtime import rule_job
from attnlens.stages.similarity import run_plot_similarity

with rule_job(snakemake):
    run_plot_similarity(
        SimilarityConfig.from_dict(snakemake.params.cfg),
        FiguresConfig.from_dict(snakemake.params.figures),
        similarity_paths=snakemake.input.similarity,
        heads_paths=snakemake.input.heads,
        distributions_stem=Path(snakemake.output.distributions[0]).with_suffix(""),
        heads_stem=Path(snakemake.output.heads[0]).with_suffix(""),
    )
