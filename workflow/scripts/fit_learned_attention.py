"""Snakemake adapter for rule fit_learned_attention."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.generation import run_fit_learned_attention

with rule_job(snakemake):
    use_threads(snakemake.threads)
    cfg = snakemake.params.cfg
    run_fit_learned_attention(
        rule_section(cfg, "generation"),
        target=rule_section(cfg, "attribution").target,
        device=rule_section(cfg, "model").device,
        model_dir=snakemake.input.model,
        train_path=snakemake.input.train,
        weights_path=snakemake.output.weights,
    )
