"""Snakemake adapter for rule similarity_examples."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.similarity import run_similarity_examples

with rule_job(snakemake):
    run_similarity_examples(
        rule_section(snakemake.params.cfg, "similarity"),
        summary_paths=snakemake.input.summaries,
        attribution_paths=snakemake.input.attributions,
        importance_path=snakemake.input.importance,
        similarity_paths=snakemake.input.similarity,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.examples,
    )
