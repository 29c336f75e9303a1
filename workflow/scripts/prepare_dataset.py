"""Snakemake adapter for rule prepare_dataset."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.data import run_prepare_dataset

with rule_job(snakemake):
    run_prepare_dataset(
        rule_section(snakemake.params.cfg, "data"),
        rule_section(snakemake.params.cfg, "model"),
        train_path=snakemake.output.train,
        test_path=snakemake.output.test,
        rationales_path=snakemake.output.rationales,
        manifest_path=snakemake.output.manifest,
    )
