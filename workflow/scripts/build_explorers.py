"""Snakemake adapter for rule build_explorers."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.figures import run_build_explorers

with rule_job(snakemake):
    cfg = rule_section(snakemake.params.cfg, "report").explorer
    run_build_explorers(
        cfg,
        bands_paths=snakemake.input.bands,
        attribution_paths=snakemake.input.attributions,
        importance_path=snakemake.input.importance,
        selection_path=snakemake.input.selection,
        test_path=snakemake.input.test,
        rationales_path=snakemake.input.rationales,
        manifest_path=snakemake.input.manifest,
        model_dir=snakemake.input.model,
        out_dir=snakemake.output.explorers,
        explanation_paths=snakemake.input.get("explanations", []),
    )
