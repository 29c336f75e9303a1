"""Snakemake adapter for rule similarity_examples."""

from attnlens.config import SimilarityConfig
from attnlens.runtime import rule_job
from attnlens.stages.similarity import run_similarity_examples

with rule_job(snakemake):
    run_similarity_examples(
        SimilarityConfig.from_dict(snakemake.params.cfg),
        summary_paths=snakemake.input.summaries,
        attribution_paths=snakemake.input.attributions,
        importance_path=snakemake.input.importance,
        similarity_paths=snakemake.input.similarity,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.examples,
    )
