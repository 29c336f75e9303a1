"""Snakemake adapter for rule attribute_pairs."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.pairs import run_attribute_pairs

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_attribute_pairs(
        rule_section(snakemake.params.cfg, "pairs"),
        test_path=snakemake.input.test,
        exact_dir=snakemake.input.get("exact"),
        shard=int(snakemake.wildcards.shard),
        matrices_path=snakemake.output.matrices,
        scores_path=snakemake.output.scores,
    )
