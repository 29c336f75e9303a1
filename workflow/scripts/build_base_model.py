"""Snakemake adapter for rule build_base_model."""

from attnlens.config import ModelConfig
from attnlens.logs import log_to
from attnlens.modeling import run_build_base_model

with log_to(snakemake.log[0]):
    run_build_base_model(
        ModelConfig.from_dict(snakemake.params.cfg),
        manifest_path=snakemake.input.manifest,
        out_dir=snakemake.output.model,
    )
