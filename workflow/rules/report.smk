rule build_explorers:
    input:
        unpack(explanation_shards),
        bands=shards("attention", "results/attention/bands/shard{shard}.safetensors"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance="results/importance/head_importance.safetensors",
        selection="results/predictions/selection.json",
        test="results/data/test.parquet",
        rationales="results/data/rationales.parquet",
        manifest="results/data/split_manifest.json",
        model="results/models/finetuned",
    output:
        explorers=report_dir("results/explorer", "{name}.html", "explorer", CLASSIFICATION, "Explorer"),
    log:
        "results/logs/build_explorers/build_explorers.log",
    benchmark:
        "results/benchmarks/build_explorers/build_explorers.tsv"
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
        targets=get_final_outputs(),
    output:
        manifest="results/manifest.json",
        notes=report("results/run_notes.csv", caption="../report/run_notes.rst", category=RUN_NOTES),
    log:
        "results/logs/manifest/manifest.log",
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        logs="results/logs",
    script:
        "../scripts/manifest.py"
