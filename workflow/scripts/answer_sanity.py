"""Snakemake adapter for rule answer_sanity."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_answer_sanity

with rule_job(snakemake):
    use_threads(snakemake.threads)
    cfg = snakemake.params.cfg
    run_answer_sanity(
        rule_section(cfg, "generation"),
        rule_section(cfg, "findings"),
        device=rule_section(cfg, "model").device,
        model_dir=snakemake.input.model,
        responses_path=snakemake.input.responses,
        scores_path=snakemake.input.scores,
        out_path=snakemake.output.sanity,
        learned_path=snakemake.input.learned or None,
    )
