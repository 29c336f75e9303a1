"""Snakemake adapter for rule bottleneck_distances.

Not named bottleneck.py: Snakemake puts this folder on sys.path, and pandas imports `bottleneck`.
"""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from pathlib import Path

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job
from attnlens.stages.topology import run_bottleneck_distances

with rule_job(snakemake):
    run_bottleneck_distances(
        rule_section(snakemake.params.cfg, "topology"),
        diagram_paths=snakemake.input.diagrams,
        test_path=snakemake.input.test,
        matrix_path=snakemake.output.matrix,
        claim_path=snakemake.output.claim,
        table_stem=Path(snakemake.output.table[0]).with_suffix(""),
    )
