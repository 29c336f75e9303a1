"""Snakemake adapter for rule plot_similarity."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_plot_similarity

with rule_job(snakemake):
    run_plot_similarity(
        rule_section(snakemake.params.cfg, "similarity"),
        rule_section(snakemake.params.cfg, "figures"),
        similarity_paths=snakemake.input.similarity,
        heads_paths=snakemake.input.heads,
        distributions_stem=Path(snakemake.output.distributions[0]).with_suffix(""),
        heads_stem=Path(snakemake.output.heads[0]).with_suffix(""),
    )
