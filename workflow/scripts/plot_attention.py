"""Snakemake adapter for rule plot_attention."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.figures import run_plot_attention

with rule_job(snakemake):
    run_plot_attention(
        rule_section(snakemake.params.cfg, "figures"),
        bins=rule_section(snakemake.params.cfg, "attention").bins,
        summary_paths=snakemake.input.summaries,
        band_paths=snakemake.input.bands,
        selection_path=snakemake.input.selection,
        heatmap_dir=snakemake.output.heatmaps,
        aggregate_stem=Path(snakemake.output.aggregate[0]).with_suffix(""),
        aggregate_path=snakemake.output.tensor,
    )
