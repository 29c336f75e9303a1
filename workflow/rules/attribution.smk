use rule model_job as attribute with:
    input:
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
        predictions_path=at("results/predictions/test.parquet"),
        selection_path=at("results/predictions/selection.json"),
    output:
        out_path=at("results/attributions/shard{shard}.parquet"),
    log:
        at("results/logs/attribute/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/attribute/shard{shard}.tsv")
    params:
        cfg=keys(
            model=["device"],
            attribution=[
                "n_shards",
                "target",
                "adaptive",
                "min_steps",
                "max_steps",
                "tolerance",
                "n_steps",
                "showcase_steps",
                "steps_per_pass",
                "autocast",
            ],
        ),


use rule model_job as attribute_embeddings with:
    input:
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
        predictions_path=at("results/predictions/test.parquet"),
        selection_path=at("results/predictions/selection.json"),
    output:
        out_path=at("results/attributions/embeddings.parquet"),
    log:
        at("results/logs/attribute_embeddings/attribute_embeddings.log"),
    benchmark:
        at("results/benchmarks/attribute_embeddings/attribute_embeddings.tsv")
    params:
        cfg=keys(
            model=["device"],
            attribution=["target", "steps_per_pass", "embeddings_mode", "embeddings_steps", "tolerance"],
        ),
