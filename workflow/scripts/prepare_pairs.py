"""Snakemake adapter for rule prepare_pairs."""

from attnlens.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.jobserver)

from attnlens.config import rule_section
from attnlens.runtime import rule_job
from attnlens.stages.pairs import run_prepare_pairs

with rule_job(snakemake):
    run_prepare_pairs(
        rule_section(snakemake.params.cfg, "pairs").data,
        train_path=snakemake.output.train,
        test_path=snakemake.output.test,
    )
