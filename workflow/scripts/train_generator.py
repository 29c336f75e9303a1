"""Snakemake adapter for rule train_generator."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_train_generator

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_train_generator(
        rule_section(snakemake.params.cfg, "model"),
        rule_section(snakemake.params.cfg, "generation"),
        train_path=snakemake.input.train,
        test_path=snakemake.input.test,
        model_dir=snakemake.output.model,
        metrics_path=snakemake.output.metrics,
    )
