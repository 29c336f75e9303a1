rule evaluate_faithfulness:
    input:
        unpack(explained_rankings),
        model="results/models/finetuned",
        test="results/data/test.parquet",
        rationales="results/data/rationales.parquet",
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
    output:
        curves="results/faithfulness/curves.parquet",
        plausibility="results/faithfulness/plausibility.parquet",
    log:
        "results/logs/evaluate_faithfulness/evaluate_faithfulness.log",
    benchmark:
        "results/benchmarks/evaluate_faithfulness/evaluate_faithfulness.tsv"
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    params:
        cfg=keys(model=["device"], faithfulness=["fractions", "rankings", "batch_size", "plausibility_k", "seed"]),
    script:
        "../scripts/evaluate_faithfulness.py"


rule plot_faithfulness:
    input:
        curves="results/faithfulness/curves.parquet",
        plausibility="results/faithfulness/plausibility.parquet",
    output:
        figure=report_figure(
            "results/paper/figures/faithfulness_curves", "faithfulness_curves", CLASSIFICATION, "Faithfulness"
        ),
        aopc=report_table("results/paper/tables/faithfulness_aopc", "faithfulness_aopc", CLASSIFICATION, "Faithfulness"),
        plausibility=report_table("results/paper/tables/plausibility", "plausibility", CLASSIFICATION, "Faithfulness"),
    log:
        "results/logs/plot_faithfulness/plot_faithfulness.log",
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(faithfulness=["fractions", "plausibility_k", "seed"], figures=["dpi"]),
    script:
        "../scripts/plot_faithfulness.py"
