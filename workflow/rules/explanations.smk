rule explain:
    input:
        model=at("results/models/finetuned"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
    output:
        explanations=at("results/explanations/shard{shard}.parquet"),
    log:
        at("results/logs/explain/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/explain/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    params:
        cfg=keys(model=["device"], explanations=["methods", "layers", "n_shards", "occlusion_max_tokens", "batch_size"]),
    script:
        "../scripts/explain.py"


rule explanation_leaderboard:
    input:
        explanations=shards("explanations", "results/explanations/shard{shard}.parquet"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        curves=at("results/faithfulness/curves.parquet"),
        plausibility=at("results/faithfulness/plausibility.parquet"),
        model=at("results/models/finetuned"),
    output:
        comparison=at("results/explanations/comparison.parquet"),
        summary=at("results/explanations/leaderboard.parquet"),
        figure=report_figure(
            "results/paper/figures/explanation_leaderboard",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
        table=report_table(
            "results/paper/tables/explanation_leaderboard",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
        long=report_table(
            "results/paper/tables/explanation_leaderboard_long",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
    log:
        at("results/logs/explanation_leaderboard/explanation_leaderboard.log"),
    benchmark:
        at("results/benchmarks/explanation_leaderboard/explanation_leaderboard.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(
            explanations=["methods", "baseline"],
            similarity=["n_permutations", "top_fraction", "rbo_p", "n_boot", "seed"],
            faithfulness=["fractions", "plausibility_k"],
            figures=["dpi"],
        ),
    script:
        "../scripts/explanation_leaderboard.py"


rule sanity_check:
    input:
        model=at("results/models/finetuned"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
    output:
        sanity=at("results/sanity/sanity.parquet"),
    log:
        at("results/logs/sanity_check/sanity_check.log"),
    benchmark:
        at("results/benchmarks/sanity_check/sanity_check.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    params:
        cfg=keys(
            model=["device"],
            explanations=["methods", "layers", "occlusion_max_tokens", "batch_size"],
            findings=["sanity_examples", "seed"],
        ),
    script:
        "../scripts/sanity_check.py"
