rule prepare_dataset:
    output:
        train=at("results/data/train.parquet"),
        test=at("results/data/test.parquet"),
        rationales=at("results/data/rationales.parquet"),
        manifest=at("results/data/split_manifest.json"),
    log:
        at("results/logs/prepare_dataset/prepare_dataset.log"),
    benchmark:
        at("results/benchmarks/prepare_dataset/prepare_dataset.tsv")
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(**PREPARE_DATASET_KEYS),
    script:
        "../scripts/prepare_dataset.py"
