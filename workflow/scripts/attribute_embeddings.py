"""Snakemake adapter for rule attribute_embeddings."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.attribution import run_attribute_embeddings

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_attribute_embeddings(
        rule_section(snakemake.params.cfg, "attribution"),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        predictions_path=snakemake.input.predictions,
        selection_path=snakemake.input.selection,
        out_path=snakemake.output.embeddings,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
