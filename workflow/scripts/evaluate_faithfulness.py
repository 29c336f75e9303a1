"""Snakemake adapter for rule evaluate_faithfulness."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.config import rule_section
from attnlens.pipeline.runtime import rule_job, use_threads
from attnlens.stages.faithfulness import run_evaluate_faithfulness

with rule_job(snakemake):
    use_threads(snakemake.threads)
    run_evaluate_faithfulness(
        rule_section(snakemake.params.cfg, "faithfulness"),
        model_dir=snakemake.input.model,
        test_path=snakemake.input.test,
        rationales_path=snakemake.input.rationales,
        attribution_paths=snakemake.input.attributions,
        summary_paths=snakemake.input.summaries,
        curves_path=snakemake.output.curves,
        plausibility_path=snakemake.output.plausibility,
        explanation_paths=snakemake.input.get("explanations", []),
        device=rule_section(snakemake.params.cfg, "model").device,
    )
