"""Snakemake adapter for rule pair_tables."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_pair_tables

with rule_job(snakemake):
    run_pair_tables(
        score_paths=snakemake.input.scores,
        exact_metrics_path=snakemake.input.get("exact_metrics"),
        out_dir=snakemake.output.tables,
    )
