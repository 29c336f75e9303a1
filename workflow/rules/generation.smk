# The generation study: which sources of a context a causal language model's generated answer rests on.


rule train_generator:
    input:
        train=shared("results/data/train.parquet"),
        test=shared("results/data/test.parquet"),
    output:
        model=directory(at("results/models/generator")),
        metrics=at("results/models/generator_metrics.json"),
    log:
        at("results/logs/train_generator/train_generator.log"),
    benchmark:
        at("results/benchmarks/train_generator/train_generator.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(
            model=[
                "source",
                "name_or_path",
                "architecture",
                "max_length",
                "attention_window",
                "seed",
                "device",
            ],
            generation=[
                "sources",
                "template",
                "max_new_tokens",
                "batch_size",
                "scratch",
                "train",
            ],
        ),
    script:
        "../scripts/train_generator.py"


rule generate_answers:
    input:
        model=at("results/models/generator"),
        metrics=at("results/models/generator_metrics.json"),
        test=shared("results/data/test.parquet"),
        rationales=shared("results/data/rationales.parquet"),
    output:
        responses=at("results/generation/responses.parquet"),
    log:
        at("results/logs/generate_answers/generate_answers.log"),
    benchmark:
        at("results/benchmarks/generate_answers/generate_answers.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=60,
    params:
        cfg=keys(
            model=["device"],
            attribution=["target"],
            generation=[
                "sources",
                "template",
                "max_new_tokens",
                "n_examples",
                "batch_size",
                "seed",
                "min_exact_match",
            ],
        ),
    script:
        "../scripts/generate_answers.py"


rule ablate_contexts:
    input:
        model=at("results/models/generator"),
        responses=at("results/generation/responses.parquet"),
    output:
        ablations=at("results/generation/ablations.parquet"),
    log:
        at("results/logs/ablate_contexts/ablate_contexts.log"),
    benchmark:
        at("results/benchmarks/ablate_contexts/ablate_contexts.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(
            model=["device"],
            generation=["template", "removal", "n_ablations", "n_heldout", "keep", "batch_size", "seed"],
        ),
    script:
        "../scripts/ablate_contexts.py"


rule fit_learned_attention:
    input:
        model=at("results/models/generator"),
        train=shared("results/data/train.parquet"),
    output:
        weights=at("results/generation/learned_attention.json"),
    log:
        at("results/logs/fit_learned_attention/fit_learned_attention.log"),
    benchmark:
        at("results/benchmarks/fit_learned_attention/fit_learned_attention.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(
            model=["device"],
            attribution=["target"],
            generation=[
                "sources",
                "template",
                "max_new_tokens",
                "score",
                "removal",
                "keep",
                "batch_size",
                "seed",
                "learned",
            ],
        ),
    script:
        "../scripts/fit_learned_attention.py"


rule explain_answers:
    input:
        model=at("results/models/generator"),
        responses=at("results/generation/responses.parquet"),
        ablations=at("results/generation/ablations.parquet"),
        learned=learned_weights,
    output:
        scores=at("results/generation/scores.parquet"),
    log:
        at("results/logs/explain_answers/explain_answers.log"),
    benchmark:
        at("results/benchmarks/explain_answers/explain_answers.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(
            model=["device"],
            generation=["methods", "score", "pool_k", "ig_steps", "alpha", "batch_size", "seed"],
        ),
    script:
        "../scripts/explain_answers.py"


rule judge_answers:
    input:
        model=at("results/models/generator"),
        responses=at("results/generation/responses.parquet"),
        ablations=at("results/generation/ablations.parquet"),
        scores=at("results/generation/scores.parquet"),
    output:
        judged=at("results/generation/judged.parquet"),
    log:
        at("results/logs/judge_answers/judge_answers.log"),
    benchmark:
        at("results/benchmarks/judge_answers/judge_answers.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    params:
        cfg=keys(
            model=["device"],
            generation=["template", "removal", "score", "top_k", "batch_size", "seed"],
        ),
    script:
        "../scripts/judge_answers.py"


rule answer_sanity:
    input:
        model=at("results/models/generator"),
        responses=at("results/generation/responses.parquet"),
        scores=at("results/generation/scores.parquet"),
        learned=learned_weights,
    output:
        sanity=at("results/generation/sanity.parquet"),
    log:
        at("results/logs/answer_sanity/answer_sanity.log"),
    benchmark:
        at("results/benchmarks/answer_sanity/answer_sanity.tsv")
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    params:
        cfg=keys(
            model=["device"],
            generation=[
                "methods",
                "template",
                "score",
                "removal",
                "keep",
                "n_ablations",
                "n_heldout",
                "pool_k",
                "ig_steps",
                "alpha",
                "batch_size",
                "seed",
            ],
            findings=["sanity_examples", "seed"],
        ),
    script:
        "../scripts/answer_sanity.py"
