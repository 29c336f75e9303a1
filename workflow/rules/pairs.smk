# Study 3: token-pair attributions of a Siamese sentence encoder, and whether attention topology tracks similarity.


use rule cpu_job as prepare_pairs with:
    output:
        train_path=at("results/data/pairs_train.parquet"),
        test_path=at("results/data/pairs_test.parquet"),
    log:
        at("results/logs/prepare_pairs/prepare_pairs.log"),
    params:
        cfg=keys(pairs=["data"]),


use rule kernel_job as train_pair_encoder with:
    input:
        train_path=at("results/data/pairs_train.parquet"),
        test_path=at("results/data/pairs_test.parquet"),
    output:
        model_dir=directory(at("results/models/pair_encoder_exact")),
        metrics_path=at("results/models/pair_encoder_exact_metrics.json"),
    log:
        at("results/logs/train_pair_encoder/train_pair_encoder.log"),
    benchmark:
        at("results/benchmarks/train_pair_encoder/train_pair_encoder.tsv")
    params:
        cfg=keys(
            pairs=[
                "encoder",
                "exact.steps",
                "exact.batch_size",
                "exact.lr",
                "exact.weight_decay",
                "exact.warmup_ratio",
                "exact.seed",
            ]
        ),


use rule kernel_job as attribute_pairs with:
    input:
        unpack(exact_model),
        test_path=at("results/data/pairs_test.parquet"),
    output:
        matrices_path=at("results/pairs/matrices_shard{shard}.safetensors"),
        scores_path=at("results/pairs/scores_shard{shard}.parquet"),
    log:
        at("results/logs/attribute_pairs/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/attribute_pairs/shard{shard}.tsv")
    params:
        cfg=keys(
            pairs=[
                "encoder",
                "attribution.layer",
                "attribution.n_steps",
                "attribution.quadrature",
                "attribution.modes",
                "attribution.chunk",
                "attribution.similarities",
                "attribution.n_shards",
            ]
        ),


use rule kernel_job as pair_convergence with:
    input:
        unpack(exact_model),
        test_path=at("results/data/pairs_test.parquet"),
    output:
        out_path=at("results/pairs/convergence.parquet"),
    log:
        at("results/logs/pair_convergence/pair_convergence.log"),
    benchmark:
        at("results/benchmarks/pair_convergence/pair_convergence.tsv")
    threads: 1  # one pair at a time: a second thread adds nothing (0.8 cores used at 2)
    params:
        cfg=keys(
            pairs=[
                "encoder",
                "attribution.layer",
                "attribution.modes",
                "attribution.chunk",
                "attribution.similarities",
                "attribution.convergence_steps",
            ]
        ),


use rule kernel_job as pair_topology with:
    input:
        pair_paths=[at("results/data/pairs_train.parquet"), at("results/data/pairs_test.parquet")],
    output:
        out_path=at("results/pairs/topology.parquet"),
        correlation_path=at("results/pairs/correlation.json"),
        table_stem=report_table("results/pairs/correlation", "pair_correlation", PAIRS, "Topology vs similarity"),
    log:
        at("results/logs/pair_topology/pair_topology.log"),
    benchmark:
        at("results/benchmarks/pair_topology/pair_topology.tsv")
    params:
        cfg=keys(pairs=["encoder.name_or_path", "encoder.max_tokens", "topology"]),
