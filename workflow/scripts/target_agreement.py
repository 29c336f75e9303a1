"""Snakemake adapter for rule target_agreement."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.similarity import run_target_agreement

with rule_job(snakemake):
    run_target_agreement(
        rule_section(snakemake.params.cfg, "similarity"),
        rule_section(snakemake.params.cfg, "figures"),
        similarity_paths=snakemake.input.similarity,
        attribution_paths=snakemake.input.attributions,
        explanation_paths=snakemake.input.get("explanations", []),
        manifest_path=snakemake.input.manifest,
        model_dir=snakemake.input.model,
        table_stem=Path(snakemake.output.table[0]).with_suffix(""),
        figure_stem=Path(snakemake.output.figure[0]).with_suffix(""),
        sensitivity_stem=Path(snakemake.output.sensitivity[0]).with_suffix(""),
    )
