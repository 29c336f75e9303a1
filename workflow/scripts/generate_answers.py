"""Snakemake adapter for rule generate_answers."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_generate_answers

with rule_job(snakemake):
    use_threads(snakemake.threads)
    cfg = snakemake.params.cfg
    run_generate_answers(
        rule_section(cfg, "generation"),
        target=rule_section(cfg, "attribution").target,
        device=rule_section(cfg, "model").device,
        model_dir=snakemake.input.model,
        metrics_path=snakemake.input.metrics,
        test_path=snakemake.input.test,
        rationales_path=snakemake.input.rationales,
        responses_path=snakemake.output.responses,
    )
