rule prepare_dataset:
    output:
        train="results/data/train.parquet",
        test="results/data/test.parquet",
        rationales="results/data/rationales.parquet",
        manifest="results/data/split_manifest.json",
    log:
        "results/logs/prepare_dataset/prepare_dataset.log",
    benchmark:
        "results/benchmarks/prepare_dataset/prepare_dataset.tsv"
    conda:
        "../../envs/pipeline.yaml"
    params:
        cfg=lookup(dpath="data", within=config),
    script:
        "../scripts/prepare_dataset.py"
