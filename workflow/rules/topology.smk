rule topology:
    input:
        model=at("results/models/finetuned"),
        test=shared("results/data/test.parquet"),
    output:
        diagrams=at("results/topology/diagrams_shard{shard}.parquet"),
        matrices=at("results/topology/matrices_shard{shard}.safetensors"),
    log:
        at("results/logs/topology/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/topology/shard{shard}.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=120,
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
    script:
        "../scripts/topology.py"


rule bottleneck_distances:
    input:
        diagrams=shards("topology", "results/topology/diagrams_shard{shard}.parquet"),
        test=shared("results/data/test.parquet"),
    output:
        matrix=at("results/topology/bottleneck.parquet"),
        claim=at("results/topology/claim.json"),
        table=report_table("results/topology/claim", "topology_claim", TOPOLOGY, "Bottleneck distances"),
    log:
        at("results/logs/bottleneck_distances/bottleneck_distances.log"),
    benchmark:
        at("results/benchmarks/bottleneck_distances/bottleneck_distances.tsv")
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(topology=["estimators", "max_dimension", "n_permutations", "seed"]),
    script:
        "../scripts/bottleneck_distances.py"
