import json

# Without a grid the run imports its classifier or trains one; a grid may do both, each rule for its own runs.
if GRID or not trains_classifier():

    use rule cpu_job as import_classifier with:
        input:
            manifest_path=shared("results/data/split_manifest.json"),
        output:
            out_dir=directory(at("results/models/finetuned")),
        log:
            at("results/logs/import_classifier/import_classifier.log"),
        benchmark:
            at("results/benchmarks/import_classifier/import_classifier.tsv")
        wildcard_constraints:
            run=group_pattern([r.name for r in GRID.runs if not r.trains_classifier] if GRID else []),
        params:
            cfg=keys(model=["source", "name_or_path", "max_length", "attention_window", "architecture"]),


if GRID or trains_classifier():

    use rule cpu_job as build_base_model with:
        input:
            manifest_path=shared("results/data/split_manifest.json"),
        output:
            out_dir=directory(at("results/models/base")),
        log:
            at("results/logs/build_base_model/build_base_model.log"),
        benchmark:
            at("results/benchmarks/build_base_model/build_base_model.tsv")
        params:
            cfg=keys(**BUILD_BASE_MODEL_KEYS),

    # A command, not a script (`accelerate launch` starts one process per GPU), so a rule of its own: a model_job's
    # conda env, priority and GPU, and eight threads.
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


use rule model_job as predict with:
    input:
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
    output:
        predictions_path=at("results/predictions/test.parquet"),
        metrics_path=at("results/predictions/metrics.json"),
        selection_path=at("results/predictions/selection.json"),
    log:
        at("results/logs/predict/predict.log"),
    benchmark:
        at("results/benchmarks/predict/predict.tsv")
    threads: 4
    params:
        cfg=keys(model=["device"], predict=["batch_size", "seed", "extra_ids"]),
