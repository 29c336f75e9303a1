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
        cfg=keys(
            model=["device"],
            explanations=[
                "methods",
                "layers",
                "n_shards",
                "occlusion_max_tokens",
                "copies_per_pass",
                "documents_per_pass",
                "targets",
            ],
        ),
    script:
        "../scripts/explain.py"


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
            explanations=["methods", "layers", "occlusion_max_tokens", "copies_per_pass", "documents_per_pass"],
            findings=["sanity_examples", "seed"],
        ),
    script:
        "../scripts/sanity_check.py"
