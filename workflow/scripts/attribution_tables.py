"""Snakemake adapter for rule attribution_tables."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_attribution_tables

with rule_job(snakemake):
    run_attribution_tables(
        rule_section(snakemake.params.cfg, "figures"),
        attribution_paths=snakemake.input.attributions,
        embeddings_path=snakemake.input.embeddings,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.tables,
    )
