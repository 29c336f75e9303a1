"""Snakemake adapter for rule render_overlays."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
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
