"""Snakemake adapter for rule sanity_check."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.explanations import run_sanity_check

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_sanity_check(
        rule_section(snakemake.params.cfg, "explanations"),
        rule_section(snakemake.params.cfg, "findings"),
        model_dir=snakemake.input.model,
        attribution_paths=snakemake.input.attributions,
        out_path=snakemake.output.sanity,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
