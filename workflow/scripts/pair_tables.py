"""Snakemake adapter for rule pair_tables."""

from attnlens.logs import log_to
from attnlens.pairs import run_pair_tables

with log_to(snakemake.log[0]):
    run_pair_tables(
        score_paths=snakemake.input.scores,
        exact_metrics_path=snakemake.input.get("exact_metrics"),
        out_dir=snakemake.output.tables,
    )
