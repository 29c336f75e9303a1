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
        metrics_paths=snakemake.input.get("metrics", []),
        summary_paths=snakemake.input.get("summary", []),
        similarity_dirs=snakemake.input.get("similarity", []),
        leaderboard_paths=snakemake.input.get("leaderboard", []),
        claim_paths=snakemake.input.get("claims", []),
        sanity_paths=snakemake.input.get("sanity", []),
        pair_tables=snakemake.input.get("pairs"),
    )
