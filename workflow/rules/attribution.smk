rule attribute:
    input:
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
        predictions=at("results/predictions/test.parquet"),
        selection=at("results/predictions/selection.json"),
    output:
        attributions=at("results/attributions/shard{shard}.parquet"),
    log:
        at("results/logs/attribute/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/attribute/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=720,
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
    script:
        "../scripts/attribute.py"


rule attribute_embeddings:
    input:
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
        predictions=at("results/predictions/test.parquet"),
        selection=at("results/predictions/selection.json"),
    output:
        embeddings=at("results/attributions/embeddings.parquet"),
    log:
        at("results/logs/attribute_embeddings/attribute_embeddings.log"),
    benchmark:
        at("results/benchmarks/attribute_embeddings/attribute_embeddings.tsv")
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
            attribution=["target", "steps_per_pass", "embeddings_mode", "embeddings_steps", "tolerance"],
        ),
    script:
        "../scripts/attribute_embeddings.py"
