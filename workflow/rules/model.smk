if not trains_classifier():

    rule import_classifier:
        input:
            manifest="results/data/split_manifest.json",
        output:
            model=directory("results/models/finetuned"),
        log:
            "results/logs/import_classifier/import_classifier.log",
        benchmark:
            "results/benchmarks/import_classifier/import_classifier.tsv"
        conda:
            "../envs/pipeline.yaml"
        resources:
            mem_mb=8000,
        params:
            cfg=keys(model=["source", "name_or_path", "max_length", "attention_window", "architecture"]),
        script:
            "../scripts/import_classifier.py"

else:

    rule build_base_model:
        input:
            manifest="results/data/split_manifest.json",
        output:
            model=directory("results/models/base"),
        log:
            "results/logs/build_base_model/build_base_model.log",
        benchmark:
            "results/benchmarks/build_base_model/build_base_model.tsv"
        conda:
            "../envs/pipeline.yaml"
        resources:
            mem_mb=4000,
        params:
            cfg=keys(
                model=[
                    "source",
                    "name_or_path",
                    "max_length",
                    "attention_window",
                    "architecture",
                    "block_size",
                    "num_random_blocks",
                    "seed",
                ]
            ),
        script:
            "../scripts/build_base_model.py"

    rule train_classifier:
        input:
            base="results/models/base",
            train="results/data/train.parquet",
            test="results/data/test.parquet",
        output:
            model=directory("results/models/finetuned"),
            metrics="results/models/train_metrics.json",
        log:
            "results/logs/train_classifier/train_classifier.log",
        benchmark:
            "results/benchmarks/train_classifier/train_classifier.tsv"
        priority: 1
        conda:
            "../envs/pipeline.yaml"
        threads: 8
        resources:
            gpu=1,
            mem_mb=16000,
            runtime=240,
        params:
            cfg=lambda wildcards: json.dumps(
                keys(
                    model=["device"],
                    train=[
                        "epochs",
                        "lr",
                        "weight_decay",
                        "warmup_ratio",
                        "batch_size",
                        "gradient_accumulation_steps",
                        "max_grad_norm",
                        "fp16",
                        "gradient_checkpointing",
                        "eval_batch_size",
                        "seed",
                    ],
                )
            ),
            launch=train_launcher,
        shell:
            "{params.launch} --train-config {params.cfg:q} --base-dir {input.base:q} "
            "--train-data {input.train:q} --test-data {input.test:q} --model-dir {output.model:q} "
            "--metrics-file {output.metrics:q} --log-file {log:q} --n-threads {threads}"


rule predict:
    input:
        model="results/models/finetuned",
        test="results/data/test.parquet",
    output:
        predictions="results/predictions/test.parquet",
        metrics="results/predictions/metrics.json",
        selection="results/predictions/selection.json",
    log:
        "results/logs/predict/predict.log",
    benchmark:
        "results/benchmarks/predict/predict.tsv"
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 4
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=60,
    params:
        cfg=keys(model=["device"], predict=["batch_size", "seed", "extra_ids"]),
    script:
        "../scripts/predict.py"
