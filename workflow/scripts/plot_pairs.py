"""Snakemake adapter for rule plot_pairs."""

from attnlens.config import PairsConfig
from attnlens.runtime import rule_job
from attnlens.stages.pairs import run_plot_pairs

with rule_job(snakemake):
    run_plot_pairs(
        PairsConfig.from_dict({"attribution": snakemake.params.attribution, "topology": snakemake.params.topology}),
        score_paths=snakemake.input.scores,
        matrix_paths=snakemake.input.matrices,
        convergence_path=snakemake.input.convergence,
        topology_path=snakemake.input.topology,
        out_dir=snakemake.output.figures,
        dpi=snakemake.params.dpi,
    )
