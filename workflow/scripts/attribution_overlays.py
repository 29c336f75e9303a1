"""Snakemake adapter for rule attribution_overlays."""

from attnlens.config import FiguresConfig
from attnlens.runtime import rule_job
from attnlens.stages.attribution import run_attribution_overlays

with rule_job(snakemake):
    run_attribution_overlays(
        FiguresConfig.from_dict(snakemake.params.cfg),
        attribution_paths=snakemake.input.attributions,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        manifest_path=snakemake.input.manifest,
        out_dir=snakemake.output.overlays,
    )
