"""Snakemake adapter for rule pair_topology."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.pairs import run_pair_topology

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_pair_topology(
        rule_section(snakemake.params.cfg, "pairs"),
        pair_paths=snakemake.input.pairs,
        out_path=snakemake.output.topology,
        correlation_path=snakemake.output.correlation,
        table_stem=Path(snakemake.output.table[0]).with_suffix(""),
    )
