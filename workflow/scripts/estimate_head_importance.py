"""Snakemake adapter for rule estimate_head_importance."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.attention import run_estimate_head_importance

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_estimate_head_importance(
        rule_section(snakemake.params.cfg, "importance"),
        model_dir=snakemake.input.model,
        examples_path=snakemake.input.examples,
        out_path=snakemake.output.importance,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
