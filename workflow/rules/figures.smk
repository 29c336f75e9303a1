use rule light_job as plot_head_importance with:
    input:
        importance_path=at("results/importance/head_importance.safetensors"),
    output:
        figure_stem=report_figure(
            "results/paper/figures/head_importance", "head_importance", CLASSIFICATION, "Head importance"
        ),
    log:
        at("results/logs/plot_head_importance/plot_head_importance.log"),
    localrule: True
    params:
        cfg=keys(figures=["dpi"]),


use rule light_job as plot_attention with:
    input:
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
        band_paths=shards("attention", "results/attention/bands/shard{shard}.safetensors"),
        selection_path=at("results/predictions/selection.json"),
    output:
        heatmap_dir=report_dir(
            "results/paper/figures/attention_heatmaps", "{name}.png", "attention_heatmaps", CLASSIFICATION, "Attention"
        ),
        aggregate_stem=report_figure(
            "results/paper/figures/attention_aggregate", "attention_aggregate", CLASSIFICATION, "Attention"
        ),
        aggregate_path=at("results/attention/aggregate.safetensors"),
    log:
        at("results/logs/plot_attention/plot_attention.log"),
    benchmark:
        at("results/benchmarks/plot_attention/plot_attention.tsv")
    localrule: True
    params:
        cfg=keys(figures=["dpi", "heatmap_scale"], attention=["bins"]),


use rule light_job as count_topk with:
    input:
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
        selection_path=at("results/predictions/selection.json"),
        model_dir=at("results/models/finetuned"),
    output:
        tables_dir=report(
            expand(at("results/paper/tables/topk_{name}.csv"), name=TOPK_TABLES, allow_missing=True),
            caption="../report/topk_tables.rst",
            category=CLASSIFICATION,
            subcategory="Top-k partners",
        ),
        figures_dir=[
            f
            for name in ["counts", "intersections", "token_occurrences"]
            for f in report_figure(
                f"results/paper/figures/topk_{name}", "topk_figures", CLASSIFICATION, "Top-k partners"
            )
        ],
    log:
        at("results/logs/count_topk/count_topk.log"),
    localrule: True
    params:
        cfg=keys(figures=["dpi", "mask", "token_of_interest", "top_n", "topk_role"]),


use rule light_job as render_overlays with:
    input:
        summary_paths=shards("attention", "results/attention/shard{shard}.safetensors"),
        selection_path=at("results/predictions/selection.json"),
        importance_path=at("results/importance/head_importance.safetensors"),
        model_dir=at("results/models/finetuned"),
    output:
        out_dir=report_dir("results/paper/overlays", "{name}.png", "overlays", CLASSIFICATION, "Attention overlays"),
    log:
        at("results/logs/render_overlays/render_overlays.log"),
    benchmark:
        at("results/benchmarks/render_overlays/render_overlays.tsv")
    localrule: True
    params:
        cfg=keys(figures=["dpi", "mode", "overlay_layers"]),


use rule light_job as build_explorers with:
    input:
        unpack(explanation_shards),
        bands_paths=shards("attention", "results/attention/bands/shard{shard}.safetensors"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        importance_path=at("results/importance/head_importance.safetensors"),
        selection_path=at("results/predictions/selection.json"),
        test_path=shared("results/data/test.parquet"),
        rationales_path=shared("results/data/rationales.parquet"),
        manifest_path=shared("results/data/split_manifest.json"),
        model_dir=at("results/models/finetuned"),
    output:
        out_dir=report_dir("results/explorer", "{name}.html", "explorer", CLASSIFICATION, "Explorer"),
    log:
        at("results/logs/build_explorers/build_explorers.log"),
    benchmark:
        at("results/benchmarks/build_explorers/build_explorers.tsv")
    localrule: True
    params:
        cfg=keys(report=["explorer.top_k", "explorer.importance"]),
