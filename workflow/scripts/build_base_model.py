"""Snakemake adapter for rule build_base_model."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.model import run_build_base_model

with rule_job(snakemake):
    run_build_base_model(
        rule_section(snakemake.params.cfg, "model"),
        manifest_path=snakemake.input.manifest,
        out_dir=snakemake.output.model,
    )
