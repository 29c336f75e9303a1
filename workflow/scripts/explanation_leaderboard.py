"""Snakemake adapter for rule explanation_leaderboard."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_explanation_leaderboard

with rule_job(snakemake):
    cfg = snakemake.params.cfg
    run_explanation_leaderboard(
        rule_section(cfg, "explanations"),
        rule_section(cfg, "similarity"),
        rule_section(cfg, "faithfulness"),
        rule_section(cfg, "figures"),
        explanation_paths=snakemake.input.explanations,
        attribution_paths=snakemake.input.attributions,
        curves_path=snakemake.input.curves,
        plausibility_path=snakemake.input.plausibility,
        model_dir=snakemake.input.model,
        comparison_path=snakemake.output.comparison,
        summary_path=snakemake.output.summary,
        figure_stem=Path(snakemake.output.figure[0]).with_suffix(""),
        tables_dir=Path(snakemake.output.table[0]).parent,
    )
