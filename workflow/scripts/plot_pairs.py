"""Snakemake adapter for rule plot_pairs."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.report import run_plot_pairs

with rule_job(snakemake):
    run_plot_pairs(
        rule_section(snakemake.params.cfg, "pairs"),
        score_paths=snakemake.input.scores,
        matrix_paths=snakemake.input.matrices,
        convergence_path=snakemake.input.convergence,
        topology_path=snakemake.input.topology,
        out_dir=snakemake.output.figures,
        dpi=rule_section(snakemake.params.cfg, "figures").dpi,
    )
