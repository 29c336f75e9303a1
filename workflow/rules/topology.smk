use rule kernel_job as topology with:
    input:
        model_dir=at("results/models/finetuned"),
        test_path=shared("results/data/test.parquet"),
    output:
        diagrams_path=at("results/topology/diagrams_shard{shard}.parquet"),
        matrices_path=at("results/topology/matrices_shard{shard}.safetensors"),
    log:
        at("results/logs/topology/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/topology/shard{shard}.tsv")
    threads: 4  # cpus-per-task on a cluster; a workstation scales it down to the cores it has
    params:
        cfg=keys(
            model=["device"],
            topology=[
                "layers",
                "pooling",
                "chunk_size",
                "estimators",
                "distance",
                "max_dimension",
                "max_edge_length",
                "sparse",
                "n_shards",
            ],
        ),


use rule cpu_job as bottleneck_distances with:
    input:
        diagram_paths=shards("topology", "results/topology/diagrams_shard{shard}.parquet"),
        test_path=shared("results/data/test.parquet"),
    output:
        matrix_path=at("results/topology/bottleneck.parquet"),
        claim_path=at("results/topology/claim.json"),
        table_stem=report_table("results/topology/claim", "topology_claim", TOPOLOGY, "Bottleneck distances"),
    log:
        at("results/logs/bottleneck_distances/bottleneck_distances.log"),
    benchmark:
        at("results/benchmarks/bottleneck_distances/bottleneck_distances.tsv")
    params:
        cfg=keys(topology=["estimators", "max_dimension", "n_permutations", "seed"]),
