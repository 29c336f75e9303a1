"""Snakemake adapter for rule count_topk."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.figures import run_count_topk

with rule_job(snakemake):
    run_count_topk(
        rule_section(snakemake.params.cfg, "figures"),
        summary_paths=snakemake.input.summaries,
        selection_path=snakemake.input.selection,
        model_dir=snakemake.input.model,
        tables_dir=Path(snakemake.output.tables[0]).parent,
        figures_dir=Path(snakemake.output.figures[0]).parent,
    )
