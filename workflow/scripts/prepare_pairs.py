"""Snakemake adapter for rule prepare_pairs."""

from attnlens.config import PairDataConfig
from attnlens.runtime import rule_job
from attnlens.stages.pairs import run_prepare_pairs

with rule_job(snakemake):
    run_prepare_pairs(
        PairDataConfig.from_dict(snakemake.params.cfg),
        train_path=snakemake.output.train,
        test_path=snakemake.output.test,
    )
