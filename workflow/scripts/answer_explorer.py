"""Snakemake adapter for rule answer_explorer."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_answer_explorer

with rule_job(snakemake):
    run_answer_explorer(
        rule_section(snakemake.params.cfg, "generation"),
        responses_path=snakemake.input.responses,
        scores_path=snakemake.input.scores,
        metrics_path=snakemake.input.metrics,
        out_dir=snakemake.output.pages,
    )
