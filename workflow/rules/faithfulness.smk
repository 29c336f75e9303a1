rule evaluate_faithfulness:
    input:
        unpack(explained_rankings),
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
        rationales=shared("results/data/rationales.parquet"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
    output:
        curves=at("results/faithfulness/curves.parquet"),
        plausibility=at("results/faithfulness/plausibility.parquet"),
    log:
        at("results/logs/evaluate_faithfulness/evaluate_faithfulness.log"),
    benchmark:
        at("results/benchmarks/evaluate_faithfulness/evaluate_faithfulness.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    params:
        cfg=keys(model=["device"], faithfulness=["fractions", "rankings", "copies_per_pass", "plausibility_k", "seed"]),
    script:
        "../scripts/evaluate_faithfulness.py"
