"""Snakemake adapter for rule plot_head_importance."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.figures import run_plot_head_importance

with rule_job(snakemake):
    run_plot_head_importance(
        rule_section(snakemake.params.cfg, "figures"),
        importance_path=snakemake.input.importance,
        stem=Path(snakemake.output[0]).with_suffix(""),
    )
