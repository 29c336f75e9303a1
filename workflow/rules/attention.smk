rule estimate_head_importance:
    input:
        model="results/models/finetuned",
        examples=f"results/data/{config['importance']['split']}.parquet",
    output:
        importance="results/importance/head_importance.safetensors",
    log:
        "results/logs/estimate_head_importance/estimate_head_importance.log",
    benchmark:
        "results/benchmarks/estimate_head_importance/estimate_head_importance.tsv"
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
        model="results/models/finetuned",
        test="results/data/test.parquet",
        selection="results/predictions/selection.json",
    output:
        summary="results/attention/shard{shard}.safetensors",
        bands="results/attention/bands/shard{shard}.safetensors",
    log:
        "results/logs/extract_attention/shard{shard}.log",
    benchmark:
        "results/benchmarks/extract_attention/shard{shard}.tsv"
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
