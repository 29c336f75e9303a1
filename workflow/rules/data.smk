use rule cpu_job as prepare_dataset with:
    output:
        train_path=at("results/data/train.parquet"),
        test_path=at("results/data/test.parquet"),
        rationales_path=at("results/data/rationales.parquet"),
        manifest_path=at("results/data/split_manifest.json"),
    log:
        at("results/logs/prepare_dataset/prepare_dataset.log"),
    benchmark:
        at("results/benchmarks/prepare_dataset/prepare_dataset.tsv")
    params:
        cfg=keys(**PREPARE_DATASET_KEYS),
