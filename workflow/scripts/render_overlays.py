"""Snakemake adapter for rule render_overlays."""

from attnlens.config import FiguresConfig
from attnlens.logs import log_to
from attnlens.overlays import run_render_overlays

with log_to(snakemake.log[0]):
    run_render_overlays(
        FiguresConfig.from_dict(snakemake.params.cfg),
        summary_paths=snakemake.input.summaries,
        selection_path=snakemake.input.selection,
        importance_path=snakemake.input.importance,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.overlays,
    )
