rule topology:
    input:
        model="results/models/finetuned",
        test="results/data/test.parquet",
    output:
        diagrams="results/topology/diagrams_shard{shard}.parquet",
        matrices="results/topology/matrices_shard{shard}.safetensors",
    log:
        "results/logs/topology/shard{shard}.log",
    benchmark:
        "results/benchmarks/topology/shard{shard}.tsv"
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
        test="results/data/test.parquet",
    output:
        matrix="results/topology/bottleneck.parquet",
        claim="results/topology/claim.json",
        table=report_table("results/topology/claim", "topology_claim", TOPOLOGY, "Bottleneck distances"),
    log:
        "results/logs/bottleneck_distances/bottleneck_distances.log",
    benchmark:
        "results/benchmarks/bottleneck_distances/bottleneck_distances.tsv"
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(topology=["estimators", "max_dimension", "n_permutations", "seed"]),
    script:
        "../scripts/bottleneck_distances.py"


rule plot_topology:
    input:
        diagrams=shards("topology", "results/topology/diagrams_shard{shard}.parquet"),
        matrix="results/topology/bottleneck.parquet",
        test="results/data/test.parquet",
        selection="results/predictions/selection.json",
    output:
        figures=report_dir("results/topology/figures", "{name}.png", "topology_figures", TOPOLOGY, "Figures"),
    log:
        "results/logs/plot_topology/plot_topology.log",
    localrule: True
    conda:
        "../envs/pipeline.yaml"
    params:
        cfg=keys(topology=["pooling", "chunk_size", "estimators"], figures=["dpi"]),
    script:
        "../scripts/plot_topology.py"
