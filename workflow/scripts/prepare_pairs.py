"""Snakemake adapter for rule prepare_pairs."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.pairs import run_prepare_pairs

with rule_job(snakemake):
    run_prepare_pairs(
        rule_section(snakemake.params.cfg, "pairs").data,
        train_path=snakemake.output.train,
        test_path=snakemake.output.test,
    )
