"""Snakemake adapter for rule manifest."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.grid import job_config
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_manifest

with rule_job(snakemake):
    run_manifest(
        job_config(snakemake.config, dict(snakemake.wildcards.items())),
        targets=list(snakemake.input),
        logs_dir=snakemake.params.logs,
        out_path=snakemake.output.manifest,
        notes_path=snakemake.output.notes,
    )
