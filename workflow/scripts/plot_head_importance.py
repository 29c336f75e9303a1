"""Snakemake adapter for rule plot_head_importance."""

from pathlib import Path

from attnlens.config import FiguresConfig
from attnlens.runtime import rule_job
from attnlens.stages.figures import run_plot_head_importance

with rule_job(snakemake):
    run_plot_head_importance(
        FiguresConfig.from_dict(snakemake.params.cfg),
        importance_path=snakemake.input.importance,
        stem=Path(snakemake.output[0]).with_suffix(""),
    )
