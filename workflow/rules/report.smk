use rule light_job as manifest with:
    input:
        targets=manifest_targets,
    output:
        out_path=at("results/manifest.json"),
        notes_path=report(at("results/run_notes.csv"), caption="../report/run_notes.rst", category=RUN_NOTES),
    log:
        at("results/logs/manifest/manifest.log"),
    localrule: True
    params:
        logs_dir=at("results/logs"),


use rule light_job as plot_faithfulness with:
    input:
        curves_path=at("results/faithfulness/curves.parquet"),
        plausibility_path=at("results/faithfulness/plausibility.parquet"),
    output:
        figure_stem=report_figure(
            "results/paper/figures/faithfulness_curves", "faithfulness_curves", CLASSIFICATION, "Faithfulness"
        ),
        tables_dir=report_table(
            "results/paper/tables/faithfulness_aopc", "faithfulness_aopc", CLASSIFICATION, "Faithfulness"
        ),
        plausibility=report_table("results/paper/tables/plausibility", "plausibility", CLASSIFICATION, "Faithfulness"),
    log:
        at("results/logs/plot_faithfulness/plot_faithfulness.log"),
    localrule: True
    params:
        cfg=keys(faithfulness=["fractions", "plausibility_k", "seed"], figures=["dpi"]),


use rule cpu_job as aggregate_similarity with:
    input:
        similarity_paths=shards("attention", "results/similarity/shard{shard}.parquet"),
        manifest_path=shared("results/data/split_manifest.json"),
    output:
        summary_path=at("results/similarity/summary.parquet"),
        tables_dir=report_dir(
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
    params:
        cfg=keys(similarity=["n_permutations", "rbo_p", "n_boot", "seed", "dataset_name", "extra_datasets"]),


use rule light_job as plot_similarity with:
    input:
        similarity_paths=shards("attention", "results/similarity/shard{shard}.parquet"),
        heads_paths=shards("attention", "results/similarity/heads_shard{shard}.parquet"),
    output:
        distributions_stem=report_figure(
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
        heads_stem=report_figure(
            "results/paper/figures/head_agreement", "head_agreement", CLASSIFICATION, "Attention vs attribution"
        ),
    log:
        at("results/logs/plot_similarity/plot_similarity.log"),
    localrule: True
    params:
        cfg=keys(similarity=["rbo_p"], figures=["dpi"]),


use rule light_job as explanation_leaderboard with:
    input:
        explanation_paths=shards("explanations", "results/explanations/shard{shard}.parquet"),
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        curves_path=at("results/faithfulness/curves.parquet"),
        plausibility_path=at("results/faithfulness/plausibility.parquet"),
        model_dir=at("results/models/finetuned"),
    output:
        comparison_path=at("results/explanations/comparison.parquet"),
        summary_path=at("results/explanations/leaderboard.parquet"),
        figure_stem=report_figure(
            "results/paper/figures/explanation_leaderboard",
            "explanation_leaderboard",
            CLASSIFICATION,
            "Explanations",
        ),
        tables_dir=report_table(
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
    params:
        cfg=keys(
            explanations=["methods", "baseline"],
            similarity=["n_permutations", "top_fraction", "rbo_p", "n_boot", "seed"],
            faithfulness=["fractions", "plausibility_k"],
            figures=["dpi"],
        ),


use rule light_job as attribution_tables with:
    input:
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        embeddings_path=at("results/attributions/embeddings.parquet"),
        selection_path=at("results/predictions/selection.json"),
        model_dir=at("results/models/finetuned"),
    output:
        out_dir=report_dir(
            "results/paper/tables/attributions",
            "{name}.csv",
            "attribution_tables",
            CLASSIFICATION,
            "Attribution tables",
        ),
    log:
        at("results/logs/attribution_tables/attribution_tables.log"),
    localrule: True
    params:
        cfg=keys(figures=["mode", "mask", "top_n"]),


use rule light_job as attribution_overlays with:
    input:
        attribution_paths=shards("attribution", "results/attributions/shard{shard}.parquet"),
        selection_path=at("results/predictions/selection.json"),
        model_dir=at("results/models/finetuned"),
        manifest_path=shared("results/data/split_manifest.json"),
    output:
        out_dir=report_dir(
            "results/paper/attribution_overlays",
            "{name}.png",
            "attribution_overlays",
            CLASSIFICATION,
            "Attribution overlays",
        ),
    log:
        at("results/logs/attribution_overlays/attribution_overlays.log"),
    localrule: True
    params:
        cfg=keys(figures=["dpi"]),


use rule light_job as plot_topology with:
    input:
        diagram_paths=shards("topology", "results/topology/diagrams_shard{shard}.parquet"),
        matrix_path=at("results/topology/bottleneck.parquet"),
        test_path=shared("results/data/test.parquet"),
        selection_path=at("results/predictions/selection.json"),
    output:
        out_dir=report_dir("results/topology/figures", "{name}.png", "topology_figures", TOPOLOGY, "Figures"),
    log:
        at("results/logs/plot_topology/plot_topology.log"),
    localrule: True
    params:
        cfg=keys(topology=["pooling", "chunk_size", "estimators"], figures=["dpi"]),


use rule light_job as pair_tables with:
    input:
        unpack(exact_metrics),
        score_paths=shards("pairs.attribution", "results/pairs/scores_shard{shard}.parquet"),
    output:
        out_dir=report_dir("results/pairs/tables", "{name}.csv", "pair_tables", PAIRS, "Scores and errors"),
    log:
        at("results/logs/pair_tables/pair_tables.log"),
    localrule: True


use rule light_job as plot_pairs with:
    input:
        score_paths=shards("pairs.attribution", "results/pairs/scores_shard{shard}.parquet"),
        matrix_paths=shards("pairs.attribution", "results/pairs/matrices_shard{shard}.safetensors"),
        convergence_path=at("results/pairs/convergence.parquet"),
        topology_path=at("results/pairs/topology.parquet"),
    output:
        out_dir=report_dir("results/pairs/figures", "{name}.png", "pair_figures", PAIRS, "Figures"),
    log:
        at("results/logs/plot_pairs/plot_pairs.log"),
    localrule: True
    params:
        cfg=keys(pairs=["attribution.n_showcase", "topology.estimators"], figures=["dpi"]),


use rule light_job as answer_leaderboard with:
    input:
        judged_paths=shards("generation", "results/generation/judged/shard{shard}.parquet"),
        responses_path=at("results/generation/responses.parquet"),
    output:
        summary_path=at("results/generation/leaderboard.parquet"),
        by_structure_path=at("results/generation/leaderboard_by_structure.parquet"),
        figure_stem=report_figure(
            "results/paper/figures/answer_leaderboard", "answer_leaderboard", GENERATION, "Leaderboard"
        ),
        tables_dir=report_table(
            "results/paper/tables/answer_leaderboard", "answer_leaderboard", GENERATION, "Leaderboard"
        ),
        long=report_table(
            "results/paper/tables/answer_leaderboard_long", "answer_leaderboard", GENERATION, "Leaderboard"
        ),
        structures=report_table(
            "results/paper/tables/answer_structures", "answer_structures", GENERATION, "Leaderboard"
        ),
        by_structure=report_table(
            "results/paper/tables/answer_leaderboard_by_structure",
            "answer_leaderboard",
            GENERATION,
            "Leaderboard",
        ),
    log:
        at("results/logs/answer_leaderboard/answer_leaderboard.log"),
    benchmark:
        at("results/benchmarks/answer_leaderboard/answer_leaderboard.tsv")
    localrule: True
    params:
        cfg=keys(
            generation=[
                "methods",
                "score",
                "removal",
                "n_heldout",
                "exact_sources",
                "top_k",
                "baseline",
                "seed",
                "n_bootstrap",
            ],
            figures=["dpi"],
        ),


use rule light_job as answer_explorer with:
    input:
        responses_path=at("results/generation/responses.parquet"),
        scores_paths=shards("generation", "results/generation/scores/shard{shard}.parquet"),
        metrics_path=at("results/models/generator_metrics.json"),
    output:
        out_dir=report_dir("results/generation/explorer", "{name}.html", "answer_explorer", GENERATION, "Explorer"),
    log:
        at("results/logs/answer_explorer/answer_explorer.log"),
    localrule: True
    params:
        cfg=keys(generation=["showcase"]),
