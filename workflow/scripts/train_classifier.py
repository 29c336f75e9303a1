"""Snakemake adapter for rule train_classifier."""

from attnlens.config import TrainConfig
from attnlens.logs import log_to, use_threads
from attnlens.train import run_train_classifier

with log_to(snakemake.log[0]):
    use_threads(snakemake.threads)
    run_train_classifier(
        TrainConfig.from_dict(snakemake.params.cfg),
        base_dir=snakemake.input.base,
        train_path=snakemake.input.train,
        test_path=snakemake.input.test,
        model_dir=snakemake.output.model,
        metrics_path=snakemake.output.metrics,
    )
