"""Snakemake adapter for rule topology."""

from attnlens.config import TopologyConfig
from attnlens.runtime import rule_job, use_threads
from attnlens.stages.topology import run_topology

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_topology(
        TopologyConfig.from_dict(snakemake.params.cfg),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        shard=int(snakemake.wildcards.shard),
        diagrams_path=snakemake.output.diagrams,
        matrices_path=snakemake.output.matrices,
    )
