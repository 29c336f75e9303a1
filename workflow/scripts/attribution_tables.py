"""Snakemake adapter for rule attribution_tables."""

from attnlens.config import FiguresConfig
from attnlens.logs import log_to
from attnlens.tables import run_attribution_tables

with log_to(snakemake.log[0]):
    run_attribution_tables(
        FiguresConfig.from_dict(snakemake.params.cfg),
        attribution_paths=snakemake.input.attributions,
        embeddings_path=snakemake.input.embeddings,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.tables,
    )
