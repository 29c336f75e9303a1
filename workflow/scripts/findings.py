"""Snakemake adapter for rule findings."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.findings import run_findings

with rule_job(snakemake):
    run_findings(
        rule_section(snakemake.params.cfg, "findings"),
        rule_section(snakemake.params.cfg, "figures"),
        runs=snakemake.params.runs,
        out_dir=snakemake.output.statements.rsplit("/", 1)[0],
        figures_dir=snakemake.output.figures,
        inputs={name: paths for name, paths in snakemake.input.items() if name != "pairs"},
        pair_tables=snakemake.input.get("pairs"),
    )
