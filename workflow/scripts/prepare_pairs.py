"""Snakemake adapter for rule prepare_pairs."""

from attnlens.config import PairDataConfig
from attnlens.logs import log_to
from attnlens.pairs import run_prepare_pairs

with log_to(snakemake.log[0]):
    run_prepare_pairs(
        PairDataConfig.from_dict(snakemake.params.cfg),
        train_path=snakemake.output.train,
        test_path=snakemake.output.test,
    )
