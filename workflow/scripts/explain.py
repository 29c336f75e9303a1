"""Snakemake adapter for rule explain (one shard)."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.explanations import run_explain

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_explain(
        rule_section(snakemake.params.cfg, "explanations"),
        model_dir=snakemake.input.model,
        attribution_paths=snakemake.input.attributions,
        shard=int(snakemake.wildcards.shard),
        out_path=snakemake.output.explanations,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
