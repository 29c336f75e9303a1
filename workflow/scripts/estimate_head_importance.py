"""Snakemake adapter for rule estimate_head_importance."""

from attnlens.config import ImportanceConfig
from attnlens.runtime import rule_job, use_threads
from attnlens.stages.attention import run_estimate_head_importance

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_estimate_head_importance(
        ImportanceConfig.from_dict(snakemake.params.cfg),
        model_dir=snakemake.input.model,
        examples_path=snakemake.input.examples,
        out_path=snakemake.output.importance,
    )
