use rule model_job as explain with:
    input:
        model_dir=at("results/models/finetuned"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
    output:
        out_path=at("results/explanations/shard{shard}.parquet"),
    log:
        at("results/logs/explain/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/explain/shard{shard}.tsv")
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


use rule model_job as sanity_check with:
    input:
        model_dir=at("results/models/finetuned"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
    output:
        out_path=at("results/sanity/sanity.parquet"),
    log:
        at("results/logs/sanity_check/sanity_check.log"),
    benchmark:
        at("results/benchmarks/sanity_check/sanity_check.tsv")
    params:
        cfg=keys(
            model=["device"],
            explanations=["methods", "layers", "occlusion_max_tokens", "copies_per_pass", "documents_per_pass"],
            findings=["sanity_examples", "seed"],
        ),
