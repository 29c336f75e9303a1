"""Snakemake adapter for rule pair_convergence."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.pairs import run_pair_convergence

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_pair_convergence(
        rule_section(snakemake.params.cfg, "pairs"),
        test_path=snakemake.input.test,
        exact_dir=snakemake.input.get("exact"),
        out_path=snakemake.output.convergence,
    )
