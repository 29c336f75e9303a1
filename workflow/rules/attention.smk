use rule model_job as estimate_head_importance with:
    input:
        model_dir=at("results/models/finetuned"),
        examples_path=shared(f"results/data/{config['importance']['split']}.parquet"),
    output:
        out_path=at("results/importance/head_importance.safetensors"),
    log:
        at("results/logs/estimate_head_importance/estimate_head_importance.log"),
    benchmark:
        at("results/benchmarks/estimate_head_importance/estimate_head_importance.tsv")
    threads: 1  # one example per backward pass: 0.9 cores used at 2 threads, so it runs beside another job
    params:
        cfg=keys(model=["device"], importance=["split", "max_examples", "estimator", "normalisation", "seed"]),


use rule model_job as extract_attention with:
    input:
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
        selection_path=at("results/predictions/selection.json"),
    output:
        summary_path=at("results/attention/shard{shard}.safetensors"),
        bands_path=at("results/attention/bands/shard{shard}.safetensors"),
    log:
        at("results/logs/extract_attention/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/extract_attention/shard{shard}.tsv")
    params:
        cfg=keys(model=["device"], attention=["n_shards", "top_k", "topk_for", "bins"]),
