use rule model_job as evaluate_faithfulness with:
    input:
        unpack(explained_rankings),
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
        rationales_path=shared("results/data/rationales.parquet"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
    output:
        curves_path=at("results/faithfulness/curves.parquet"),
        plausibility_path=at("results/faithfulness/plausibility.parquet"),
    log:
        at("results/logs/evaluate_faithfulness/evaluate_faithfulness.log"),
    benchmark:
        at("results/benchmarks/evaluate_faithfulness/evaluate_faithfulness.tsv")
    params:
        cfg=keys(model=["device"], faithfulness=["fractions", "rankings", "copies_per_pass", "plausibility_k", "seed"]),
