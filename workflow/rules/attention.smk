rule estimate_head_importance:
    input:
        model=at("results/models/finetuned"),
        examples=shared(f"results/data/{config['importance']['split']}.parquet"),
    output:
        importance=at("results/importance/head_importance.safetensors"),
    log:
        at("results/logs/estimate_head_importance/estimate_head_importance.log"),
    benchmark:
        at("results/benchmarks/estimate_head_importance/estimate_head_importance.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 1  # one example per backward pass: 0.9 cores used at 2 threads, so it runs beside another job
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(model=["device"], importance=["split", "max_examples", "estimator", "normalisation", "seed"]),
    script:
        "../scripts/estimate_head_importance.py"


rule extract_attention:
    input:
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
        selection=at("results/predictions/selection.json"),
    output:
        summary=at("results/attention/shard{shard}.safetensors"),
        bands=at("results/attention/bands/shard{shard}.safetensors"),
    log:
        at("results/logs/extract_attention/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/extract_attention/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(model=["device"], attention=["n_shards", "top_k", "topk_for", "bins"]),
    script:
        "../scripts/extract_attention.py"
