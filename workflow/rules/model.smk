import json

# Without a grid the run imports its classifier or trains one; a grid may do both, each rule for its own runs.
if GRID or not trains_classifier():

    rule import_classifier:
        input:
            manifest=shared("results/data/split_manifest.json"),
        output:
            model=directory(at("results/models/finetuned")),
        log:
            at("results/logs/import_classifier/import_classifier.log"),
        benchmark:
            at("results/benchmarks/import_classifier/import_classifier.tsv")
        wildcard_constraints:
            run=group_pattern([r.name for r in GRID.runs if not r.trains_classifier] if GRID else []),
        conda:
            "../envs/pipeline.yaml"
        resources:
            mem_mb=8000,
        params:
            cfg=keys(model=["source", "name_or_path", "max_length", "attention_window", "architecture"]),
        script:
            "../scripts/import_classifier.py"


if GRID or trains_classifier():

    rule build_base_model:
        input:
            manifest=shared("results/data/split_manifest.json"),
        output:
            model=directory(at("results/models/base")),
        log:
            at("results/logs/build_base_model/build_base_model.log"),
        benchmark:
            at("results/benchmarks/build_base_model/build_base_model.tsv")
        conda:
            "../envs/pipeline.yaml"
        resources:
            mem_mb=4000,
        params:
            cfg=keys(**BUILD_BASE_MODEL_KEYS),
        script:
            "../scripts/build_base_model.py"

    rule train_classifier:
        input:
            base=shared("results/models/base"),
            train=shared("results/data/train.parquet"),
            test=shared("results/data/test.parquet"),
        output:
            model=directory(at("results/models/finetuned")),
            metrics=at("results/models/train_metrics.json"),
        log:
            at("results/logs/train_classifier/train_classifier.log"),
        benchmark:
            at("results/benchmarks/train_classifier/train_classifier.tsv")
        wildcard_constraints:
            run=group_pattern([r.name for r in GRID.runs if r.trains_classifier] if GRID else []),
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
                job_keys(
                    wildcards,
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
                        "bf16",
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
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
    output:
        predictions=at("results/predictions/test.parquet"),
        metrics=at("results/predictions/metrics.json"),
        selection=at("results/predictions/selection.json"),
    log:
        at("results/logs/predict/predict.log"),
    benchmark:
        at("results/benchmarks/predict/predict.tsv")
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
