"""Snakemake adapter for rule import_classifier."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.model import run_import_classifier

with rule_job(snakemake):
    run_import_classifier(
        rule_section(snakemake.params.cfg, "model"),
        manifest_path=snakemake.input.manifest,
        out_dir=snakemake.output.model,
    )
