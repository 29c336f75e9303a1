"""Snakemake adapter for rule ablate_contexts."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_ablate_contexts

with rule_job(snakemake):
    use_threads(snakemake.threads)
    cfg = snakemake.params.cfg
    run_ablate_contexts(
        rule_section(cfg, "generation"),
        device=rule_section(cfg, "model").device,
        model_dir=snakemake.input.model,
        responses_path=snakemake.input.responses,
        ablations_path=snakemake.output.ablations,
    )
