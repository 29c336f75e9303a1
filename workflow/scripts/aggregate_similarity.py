"""Snakemake adapter for rule aggregate_similarity."""

from attnlens.config import SimilarityConfig
from attnlens.logs import log_to
from attnlens.similarity import run_aggregate_similarity

with log_to(snakemake.log[0]):
    run_aggregate_similarity(
        SimilarityConfig.from_dict(snakemake.params.cfg),
        similarity_paths=snakemake.input.similarity,
        summary_path=snakemake.output.summary,
        tables_dir=snakemake.output.tables,
    )
