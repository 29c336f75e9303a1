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
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(
            data=[
                "source",
                "seed",
                "test_fraction",
                "text_column",
                "label_column",
                "id_column",
                "path",
                "classes",
                "hub",
                "synthetic",
            ],
            model=["source", "name_or_path", "max_length"],
        ),
    script:
        "../scripts/prepare_dataset.py"
