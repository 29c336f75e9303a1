"""Snakemake adapter for rule plot_faithfulness."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_plot_faithfulness

with rule_job(snakemake):
    run_plot_faithfulness(
        rule_section(snakemake.params.cfg, "faithfulness"),
        rule_section(snakemake.params.cfg, "figures"),
        curves_path=snakemake.input.curves,
        plausibility_path=snakemake.input.plausibility,
        figure_stem=Path(snakemake.output.figure[0]).with_suffix(""),
        tables_dir=Path(snakemake.output.aopc[0]).parent,
    )
