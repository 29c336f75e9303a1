"""Snakemake adapter for rule render_overlays."""

from attnlens.config import rule_section
from attnlens.runtime import rule_job
from attnlens.stages.figures import run_render_overlays

with rule_job(snakemake):
    run_render_overlays(
        rule_section(snakemake.params.cfg, "figures"),
        summary_paths=snakemake.input.summaries,
        selection_path=snakemake.input.selection,
        importance_path=snakemake.input.importance,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.overlays,
    )
