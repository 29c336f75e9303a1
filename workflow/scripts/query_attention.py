"""Snakemake adapter for rule query_attention."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.similarity import run_query_attention

with rule_job(snakemake):
    run_query_attention(
        rule_section(snakemake.params.cfg, "similarity"),
        summary_paths=snakemake.input.summaries,
        attribution_paths=snakemake.input.attributions,
        test_path=snakemake.input.test,
        rationales_path=snakemake.input.rationales,
        manifest_path=snakemake.input.manifest,
        model_dir=snakemake.input.model,
        table_stem=Path(snakemake.output.table[0]).with_suffix(""),
    )
