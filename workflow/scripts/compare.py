"""Snakemake adapter for rule compare."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.similarity import run_compare

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_compare(
        rule_section(snakemake.params.cfg, "similarity"),
        summary_path=snakemake.input.summary,
        attribution_paths=snakemake.input.attributions,
        importance_path=snakemake.input.importance,
        model_dir=snakemake.input.model,
        out_path=snakemake.output.similarity,
        heads_path=snakemake.output.heads,
    )
