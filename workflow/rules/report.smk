rule build_explorers:
    input:
        unpack(explanation_shards),
        bands=shards("attention", "results/attention/bands/shard{shard}.safetensors"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance=at("results/importance/head_importance.safetensors"),
        selection=at("results/predictions/selection.json"),
        test=shared("results/data/test.parquet"),
        rationales=shared("results/data/rationales.parquet"),
        manifest=shared("results/data/split_manifest.json"),
        model=at("results/models/finetuned"),
    output:
        explorers=report_dir("results/explorer", "{name}.html", "explorer", CLASSIFICATION, "Explorer"),
    log:
        at("results/logs/build_explorers/build_explorers.log"),
    benchmark:
        at("results/benchmarks/build_explorers/build_explorers.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    resources:
        mem_mb=8000,
    params:
        cfg=keys(report=["explorer.top_k", "explorer.importance"]),
    script:
        "../scripts/build_explorers.py"


rule manifest:
    input:
        targets=manifest_targets,
    output:
        manifest=at("results/manifest.json"),
        notes=report(at("results/run_notes.csv"), caption="../report/run_notes.rst", category=RUN_NOTES),
    log:
        at("results/logs/manifest/manifest.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        logs=at("results/logs"),
    script:
        "../scripts/manifest.py"
