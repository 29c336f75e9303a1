# Study 3: token-pair attributions of a Siamese sentence encoder, and whether attention topology tracks similarity.


rule prepare_pairs:
    output:
        train=at("results/data/pairs_train.parquet"),
        test=at("results/data/pairs_test.parquet"),
    log:
        at("results/logs/prepare_pairs/prepare_pairs.log"),
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(pairs=["data"]),
    script:
        "../scripts/prepare_pairs.py"


rule train_pair_encoder:
    input:
        train=at("results/data/pairs_train.parquet"),
        test=at("results/data/pairs_test.parquet"),
    output:
        model=directory(at("results/models/pair_encoder_exact")),
        metrics=at("results/models/pair_encoder_exact_metrics.json"),
    log:
        at("results/logs/train_pair_encoder/train_pair_encoder.log"),
    benchmark:
        at("results/benchmarks/train_pair_encoder/train_pair_encoder.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
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
    script:
        "../scripts/train_pair_encoder.py"


rule attribute_pairs:
    input:
        unpack(exact_model),
        test=at("results/data/pairs_test.parquet"),
    output:
        matrices=at("results/pairs/matrices_shard{shard}.safetensors"),
        scores=at("results/pairs/scores_shard{shard}.parquet"),
    log:
        at("results/logs/attribute_pairs/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/attribute_pairs/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=120,
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
    script:
        "../scripts/attribute_pairs.py"


rule pair_convergence:
    input:
        unpack(exact_model),
        test=at("results/data/pairs_test.parquet"),
    output:
        convergence=at("results/pairs/convergence.parquet"),
    log:
        at("results/logs/pair_convergence/pair_convergence.log"),
    benchmark:
        at("results/benchmarks/pair_convergence/pair_convergence.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 1  # one pair at a time: a second thread adds nothing (0.8 cores used at 2)
    resources:
        mem_mb=4000,
        runtime=60,
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
    script:
        "../scripts/pair_convergence.py"


rule pair_topology:
    input:
        pairs=[at("results/data/pairs_train.parquet"), at("results/data/pairs_test.parquet")],
    output:
        topology=at("results/pairs/topology.parquet"),
        correlation=at("results/pairs/correlation.json"),
        table=report_table("results/pairs/correlation", "pair_correlation", PAIRS, "Topology vs similarity"),
    log:
        at("results/logs/pair_topology/pair_topology.log"),
    benchmark:
        at("results/benchmarks/pair_topology/pair_topology.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    params:
        cfg=keys(pairs=["encoder.name_or_path", "encoder.max_tokens", "topology"]),
    script:
        "../scripts/pair_topology.py"
