"""Snakemake adapter for rule predict."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.model import run_predict

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_predict(
        rule_section(snakemake.params.cfg, "predict"),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        predictions_path=snakemake.output.predictions,
        metrics_path=snakemake.output.metrics,
        selection_path=snakemake.output.selection,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
