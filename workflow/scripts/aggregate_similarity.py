"""Snakemake adapter for rule aggregate_similarity."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_aggregate_similarity

with rule_job(snakemake):
    run_aggregate_similarity(
        rule_section(snakemake.params.cfg, "similarity"),
        similarity_paths=snakemake.input.similarity,
        manifest_path=snakemake.input.manifest,
        summary_path=snakemake.output.summary,
        tables_dir=snakemake.output.tables,
    )
