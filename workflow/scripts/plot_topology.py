"""Snakemake adapter for rule plot_topology."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_plot_topology

with rule_job(snakemake):
    run_plot_topology(
        rule_section(snakemake.params.cfg, "topology"),
        rule_section(snakemake.params.cfg, "figures"),
        diagram_paths=snakemake.input.diagrams,
        matrix_path=snakemake.input.matrix,
        test_path=snakemake.input.test,
        selection_path=snakemake.input.selection,
        out_dir=snakemake.output.figures,
    )
