"""Snakemake adapter for rule topology."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.topology import run_topology

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_topology(
        rule_section(snakemake.params.cfg, "topology"),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        shard=int(snakemake.wildcards.shard),
        diagrams_path=snakemake.output.diagrams,
        matrices_path=snakemake.output.matrices,
        device=rule_section(snakemake.params.cfg, "model").device,
    )
