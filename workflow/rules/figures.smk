rule plot_head_importance:
    input:
        importance=at("results/importance/head_importance.safetensors"),
    output:
        report_figure("results/paper/figures/head_importance", "head_importance", CLASSIFICATION, "Head importance"),
    log:
        at("results/logs/plot_head_importance/plot_head_importance.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["dpi"]),
    script:
        "../scripts/plot_head_importance.py"


rule plot_attention:
    input:
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
        bands=shards("attention", "results/attention/bands/shard{shard}.safetensors"),
        selection=at("results/predictions/selection.json"),
    output:
        heatmaps=report_dir(
            "results/paper/figures/attention_heatmaps", "{name}.png", "attention_heatmaps", CLASSIFICATION, "Attention"
        ),
        aggregate=report_figure(
            "results/paper/figures/attention_aggregate", "attention_aggregate", CLASSIFICATION, "Attention"
        ),
        tensor=at("results/attention/aggregate.safetensors"),
    log:
        at("results/logs/plot_attention/plot_attention.log"),
    benchmark:
        at("results/benchmarks/plot_attention/plot_attention.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["dpi", "heatmap_scale"], attention=["bins"]),
    script:
        "../scripts/plot_attention.py"


rule count_topk:
    input:
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
        selection=at("results/predictions/selection.json"),
        model=at("results/models/finetuned"),
    output:
        tables=report(
            expand(at("results/paper/tables/topk_{name}.csv"), name=TOPK_TABLES, allow_missing=True),
            caption="../report/topk_tables.rst",
            category=CLASSIFICATION,
            subcategory="Top-k partners",
        ),
        figures=[
            f
            for name in ["counts", "intersections", "token_occurrences"]
            for f in report_figure(
                f"results/paper/figures/topk_{name}", "topk_figures", CLASSIFICATION, "Top-k partners"
            )
        ],
    log:
        at("results/logs/count_topk/count_topk.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["dpi", "mask", "token_of_interest", "top_n", "topk_role"]),
    script:
        "../scripts/count_topk.py"


rule render_overlays:
    input:
        summaries=shards("attention", "results/attention/shard{shard}.safetensors"),
        selection=at("results/predictions/selection.json"),
        importance=at("results/importance/head_importance.safetensors"),
        model=at("results/models/finetuned"),
    output:
        overlays=report_dir("results/paper/overlays", "{name}.png", "overlays", CLASSIFICATION, "Attention overlays"),
    log:
        at("results/logs/render_overlays/render_overlays.log"),
    benchmark:
        at("results/benchmarks/render_overlays/render_overlays.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["dpi", "mode", "overlay_layers"]),
    script:
        "../scripts/render_overlays.py"


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
