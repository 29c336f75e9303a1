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


rule plot_faithfulness:
    input:
        curves=at("results/faithfulness/curves.parquet"),
        plausibility=at("results/faithfulness/plausibility.parquet"),
    output:
        figure=report_figure(
            "results/paper/figures/faithfulness_curves", "faithfulness_curves", CLASSIFICATION, "Faithfulness"
        ),
        aopc=report_table("results/paper/tables/faithfulness_aopc", "faithfulness_aopc", CLASSIFICATION, "Faithfulness"),
        plausibility=report_table("results/paper/tables/plausibility", "plausibility", CLASSIFICATION, "Faithfulness"),
    log:
        at("results/logs/plot_faithfulness/plot_faithfulness.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(faithfulness=["fractions", "plausibility_k", "seed"], figures=["dpi"]),
    script:
        "../scripts/plot_faithfulness.py"


rule aggregate_similarity:
    input:
        similarity=shards("attention", "results/similarity/shard{shard}.parquet"),
        manifest=shared("results/data/split_manifest.json"),
    output:
        summary=at("results/similarity/summary.parquet"),
        tables=report_dir(
            "results/paper/tables/similarity",
            "{name}.csv",
            "similarity_tables",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
    log:
        at("results/logs/aggregate_similarity/aggregate_similarity.log"),
    benchmark:
        at("results/benchmarks/aggregate_similarity/aggregate_similarity.tsv")
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(similarity=["n_permutations", "rbo_p", "n_boot", "seed", "dataset_name", "extra_datasets"]),
    script:
        "../scripts/aggregate_similarity.py"


rule plot_similarity:
    input:
        similarity=shards("attention", "results/similarity/shard{shard}.parquet"),
        heads=shards("attention", "results/similarity/heads_shard{shard}.parquet"),
    output:
        distributions=report_figure(
            "results/paper/figures/similarity_distributions",
            "similarity_distributions",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        scaled=report_figure(
            "results/paper/figures/similarity_distributions_scaled",
            "similarity_distributions",
            CLASSIFICATION,
            "Attention vs attribution",
        ),
        heads=report_figure(
            "results/paper/figures/head_agreement", "head_agreement", CLASSIFICATION, "Attention vs attribution"
        ),
    log:
        at("results/logs/plot_similarity/plot_similarity.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(similarity=["rbo_p"], figures=["dpi"]),
    script:
        "../scripts/plot_similarity.py"


rule explanation_leaderboard:
    input:
        explanations=shards("explanations", "results/explanations/shard{shard}.parquet"),
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        curves=at("results/faithfulness/curves.parquet"),
        plausibility=at("results/faithfulness/plausibility.parquet"),
        model=at("results/models/finetuned"),
    output:
        comparison=at("results/explanations/comparison.parquet"),
        summary=at("results/explanations/leaderboard.parquet"),
        figure=report_figure(
            "results/paper/figures/explanation_leaderboard",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
        table=report_table(
            "results/paper/tables/explanation_leaderboard",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
        long=report_table(
            "results/paper/tables/explanation_leaderboard_long",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
    log:
        at("results/logs/explanation_leaderboard/explanation_leaderboard.log"),
    benchmark:
        at("results/benchmarks/explanation_leaderboard/explanation_leaderboard.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(
            explanations=["methods", "baseline"],
            similarity=["n_permutations", "top_fraction", "rbo_p", "n_boot", "seed"],
            faithfulness=["fractions", "plausibility_k"],
            figures=["dpi"],
        ),
    script:
        "../scripts/explanation_leaderboard.py"


rule attribution_tables:
    input:
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        embeddings=at("results/attributions/embeddings.parquet"),
        selection=at("results/predictions/selection.json"),
        model=at("results/models/finetuned"),
    output:
        tables=report_dir(
            "results/paper/tables/attributions",
            "{name}.csv",
            "attribution_tables",
            CLASSIFICATION,
            "Attribution tables",
        ),
    log:
        at("results/logs/attribution_tables/attribution_tables.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["mode", "mask", "top_n"]),
    script:
        "../scripts/attribution_tables.py"


rule attribution_overlays:
    input:
        attributions=shards("attribution", "results/attributions/shard{shard}.parquet"),
        selection=at("results/predictions/selection.json"),
        model=at("results/models/finetuned"),
        manifest=shared("results/data/split_manifest.json"),
    output:
        overlays=report_dir(
            "results/paper/attribution_overlays",
            "{name}.png",
            "attribution_overlays",
            CLASSIFICATION,
            "Attribution overlays",
        ),
    log:
        at("results/logs/attribution_overlays/attribution_overlays.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(figures=["dpi"]),
    script:
        "../scripts/attribution_overlays.py"


rule plot_topology:
    input:
        diagrams=shards("topology", "results/topology/diagrams_shard{shard}.parquet"),
        matrix=at("results/topology/bottleneck.parquet"),
        test=shared("results/data/test.parquet"),
        selection=at("results/predictions/selection.json"),
    output:
        figures=report_dir("results/topology/figures", "{name}.png", "topology_figures", TOPOLOGY, "Figures"),
    log:
        at("results/logs/plot_topology/plot_topology.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(topology=["pooling", "chunk_size", "estimators"], figures=["dpi"]),
    script:
        "../scripts/plot_topology.py"


rule pair_tables:
    input:
        unpack(exact_metrics),
        scores=shards("pairs.attribution", "results/pairs/scores_shard{shard}.parquet"),
    output:
        tables=report_dir("results/pairs/tables", "{name}.csv", "pair_tables", PAIRS, "Scores and errors"),
    log:
        at("results/logs/pair_tables/pair_tables.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    script:
        "../scripts/pair_tables.py"


rule plot_pairs:
    input:
        scores=shards("pairs.attribution", "results/pairs/scores_shard{shard}.parquet"),
        matrices=shards("pairs.attribution", "results/pairs/matrices_shard{shard}.safetensors"),
        convergence=at("results/pairs/convergence.parquet"),
        topology=at("results/pairs/topology.parquet"),
    output:
        figures=report_dir("results/pairs/figures", "{name}.png", "pair_figures", PAIRS, "Figures"),
    log:
        at("results/logs/plot_pairs/plot_pairs.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(pairs=["attribution.n_showcase", "topology.estimators"], figures=["dpi"]),
    script:
        "../scripts/plot_pairs.py"


rule answer_leaderboard:
    input:
        judged=at("results/generation/judged.parquet"),
    output:
        summary=at("results/generation/leaderboard.parquet"),
        figure=report_figure(
            "results/paper/figures/answer_leaderboard", "answer_leaderboard", GENERATION, "Leaderboard"
        ),
        table=report_table("results/paper/tables/answer_leaderboard", "answer_leaderboard", GENERATION, "Leaderboard"),
        long=report_table(
            "results/paper/tables/answer_leaderboard_long", "answer_leaderboard", GENERATION, "Leaderboard"
        ),
    log:
        at("results/logs/answer_leaderboard/answer_leaderboard.log"),
    benchmark:
        at("results/benchmarks/answer_leaderboard/answer_leaderboard.tsv")
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(
            generation=["methods", "score", "removal", "n_heldout", "top_k", "baseline", "seed", "n_bootstrap"],
            figures=["dpi"],
        ),
    script:
        "../scripts/answer_leaderboard.py"


rule answer_explorer:
    input:
        responses=at("results/generation/responses.parquet"),
        scores=at("results/generation/scores.parquet"),
        metrics=at("results/models/generator_metrics.json"),
    output:
        pages=report_dir("results/generation/explorer", "{name}.html", "answer_explorer", GENERATION, "Explorer"),
    log:
        at("results/logs/answer_explorer/answer_explorer.log"),
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(generation=["showcase"]),
    script:
        "../scripts/answer_explorer.py"
