rule compare:
    input:
        summary=at("results/attention/shard{shard}.safetensors"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance=at("results/importance/head_importance.safetensors"),
        model=at("results/models/finetuned"),
    output:
        similarity=at("results/similarity/shard{shard}.parquet"),
        heads=at("results/similarity/heads_shard{shard}.parquet"),
    log:
        at("results/logs/compare/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/compare/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=120,
    params:
        cfg=keys(similarity=["n_permutations", "top_fraction", "rbo_p", "legacy_mask", "legacy_sort", "seed"]),
    script:
        "../scripts/compare.py"


rule target_agreement:
    input:
        unpack(every_target_explanations),
        similarity=shards("attention", "results/similarity/shard{shard}.parquet"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        manifest=shared("results/data/split_manifest.json"),
        model=at("results/models/finetuned"),
    output:
        table=report_table(
            "results/paper/tables/target_agreement",
            "target_agreement",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        sensitivity=report_table(
            "results/paper/tables/target_sensitivity",
            "target_sensitivity",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        figure=report_figure(
            "results/paper/figures/target_agreement",
            "target_agreement",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/target_agreement/target_agreement.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(
            similarity=["top_fraction", "rbo_p", "legacy_mask", "n_boot", "seed"],
            figures=["dpi"],
        ),
    script:
        "../scripts/target_agreement.py"


rule query_attention:
    input:
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        test=shared("results/data/test.parquet"),
        rationales=shared("results/data/rationales.parquet"),
        manifest=shared("results/data/split_manifest.json"),
        model=at("results/models/finetuned"),
    output:
        table=report_table(
            "results/paper/tables/query_attention",
            "query_attention",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/query_attention/query_attention.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(similarity=["n_boot", "seed"]),
    script:
        "../scripts/query_attention.py"


rule similarity_examples:
    input:
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance=at("results/importance/head_importance.safetensors"),
        similarity=shards("attention", "results/similarity/shard{shard}.parquet"),
        selection=at("results/predictions/selection.json"),
        model=at("results/models/finetuned"),
    output:
        examples=report_dir(
            "results/paper/similarity_examples",
            "{name}.md",
            "similarity_examples",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/similarity_examples/similarity_examples.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(similarity=["top_fraction", "legacy_mask", "legacy_sort"]),
    script:
        "../scripts/similarity_examples.py"
