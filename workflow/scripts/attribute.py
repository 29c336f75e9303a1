"""Snakemake adapter for rule attribute (one shard)."""

from attnlens.attribution import run_attribute
from attnlens.config import AttributionConfig
from attnlens.logs import log_to, use_threads

with log_to(snakemake.log[0]):
    use_threads(snakemake.threads)
    run_attribute(
        AttributionConfig.from_dict(snakemake.params.cfg),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        predictions_path=snakemake.input.predictions,
        selection_path=snakemake.input.selection,
        shard=int(snakemake.wildcards.shard),
        out_path=snakemake.output.attributions,
    )
