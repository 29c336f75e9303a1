use rule kernel_job as compare with:
    input:
        summary_path=at("results/attention/shard{shard}.safetensors"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance_path=at("results/importance/head_importance.safetensors"),
        model_dir=at("results/models/finetuned"),
    output:
        out_path=at("results/similarity/shard{shard}.parquet"),
        heads_path=at("results/similarity/heads_shard{shard}.parquet"),
    log:
        at("results/logs/compare/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/compare/shard{shard}.tsv")
    threads: 4  # cpus-per-task on a cluster; a workstation scales it down to the cores it has
    params:
        cfg=keys(similarity=["n_permutations", "top_fraction", "rbo_p", "legacy_mask", "legacy_sort", "seed"]),


use rule light_job as target_agreement with:
    input:
        unpack(every_target_explanations),
        similarity_paths=shards("attention", "results/similarity/shard{shard}.parquet"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        manifest_path=shared("results/data/split_manifest.json"),
        model_dir=at("results/models/finetuned"),
    output:
        table_stem=report_table(
            "results/paper/tables/target_agreement",
            "target_agreement",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        sensitivity_stem=report_table(
            "results/paper/tables/target_sensitivity",
            "target_sensitivity",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        figure_stem=report_figure(
            "results/paper/figures/target_agreement",
            "target_agreement",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/target_agreement/target_agreement.log"),
    localrule: True
    params:
        cfg=keys(
            similarity=["top_fraction", "rbo_p", "legacy_mask", "n_boot", "seed"],
            figures=["dpi"],
        ),


use rule light_job as query_attention with:
    input:
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        test_path=shared("results/data/test.parquet"),
        rationales_path=shared("results/data/rationales.parquet"),
        manifest_path=shared("results/data/split_manifest.json"),
        model_dir=at("results/models/finetuned"),
    output:
        table_stem=report_table(
            "results/paper/tables/query_attention",
            "query_attention",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/query_attention/query_attention.log"),
    localrule: True
    params:
        cfg=keys(similarity=["n_boot", "seed"]),


use rule light_job as similarity_examples with:
    input:
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance_path=at("results/importance/head_importance.safetensors"),
        similarity_paths=shards("attention", "results/similarity/shard{shard}.parquet"),
        selection_path=at("results/predictions/selection.json"),
        model_dir=at("results/models/finetuned"),
    output:
        out_dir=report_dir(
            "results/paper/similarity_examples",
            "{name}.md",
            "similarity_examples",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/similarity_examples/similarity_examples.log"),
    localrule: True
    params:
        cfg=keys(similarity=["top_fraction", "legacy_mask", "legacy_sort"]),
