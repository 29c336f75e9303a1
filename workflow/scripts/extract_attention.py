"""Snakemake adapter for rule extract_attention (one shard)."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.attention import run_extract_attention

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_extract_attention(
        rule_section(snakemake.params.cfg, "attention"),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        selection_path=snakemake.input.selection,
        shard=int(snakemake.wildcards.shard),
        summary_path=snakemake.output.summary,
        bands_path=snakemake.output.bands,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
