"""Snakemake adapter for rule explain_answers."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_explain_answers

with rule_job(snakemake):
    use_threads(snakemake.threads)
    cfg = snakemake.params.cfg
    run_explain_answers(
        rule_section(cfg, "generation"),
        device=rule_section(cfg, "model").device,
        model_dir=snakemake.input.model,
        responses_path=snakemake.input.responses,
        ablations_path=snakemake.input.ablations,
        scores_path=snakemake.output.scores,
        learned_path=snakemake.input.learned or None,
    )
