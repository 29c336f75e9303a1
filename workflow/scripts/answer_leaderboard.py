"""Snakemake adapter for rule answer_leaderboard."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_answer_leaderboard

with rule_job(snakemake):
    cfg = snakemake.params.cfg
    run_answer_leaderboard(
        rule_section(cfg, "generation"),
        rule_section(cfg, "figures"),
        judged_path=snakemake.input.judged,
        summary_path=snakemake.output.summary,
        tables_dir=Path(snakemake.output.table[0]).parent,
        figure_stem=Path(snakemake.output.figure[0]).with_suffix(""),
    )
