# The generation study: which sources of a context a causal language model's generated answer rests on.


use rule model_job as train_generator with:
    input:
        train_path=shared("results/data/train.parquet"),
        test_path=shared("results/data/test.parquet"),
    output:
        model_dir=directory(at("results/models/generator")),
        metrics_path=at("results/models/generator_metrics.json"),
    log:
        at("results/logs/train_generator/train_generator.log"),
    benchmark:
        at("results/benchmarks/train_generator/train_generator.tsv")
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
                "system_prompt",
                "max_new_tokens",
                "stop",
                "batch_size",
                "scratch",
                "train",
            ],
        ),


use rule model_job as generate_answers with:
    input:
        model_dir=at("results/models/generator"),
        metrics_path=at("results/models/generator_metrics.json"),
        test_path=shared("results/data/test.parquet"),
        rationales_path=shared("results/data/rationales.parquet"),
    output:
        responses_path=at("results/generation/responses.parquet"),
    log:
        at("results/logs/generate_answers/generate_answers.log"),
    benchmark:
        at("results/benchmarks/generate_answers/generate_answers.tsv")
    params:
        cfg=keys(
            model=["device"],
            attribution=["target"],
            generation=[
                "sources",
                "template",
                "system_prompt",
                "max_new_tokens",
                "stop",
                "n_examples",
                "targets",
                "batch_size",
                "seed",
                "min_exact_match",
            ],
        ),


use rule model_job as ablate_contexts with:
    input:
        model_dir=at("results/models/generator"),
        responses_path=at("results/generation/responses.parquet"),
    output:
        ablations_path=at("results/generation/ablations/shard{shard}.parquet"),
    log:
        at("results/logs/ablate_contexts/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/ablate_contexts/shard{shard}.tsv")
    params:
        cfg=keys(
            model=["device"],
            generation=[
                "methods",
                "template",
                "system_prompt",
                "removal",
                "score",
                "n_ablations",
                "n_heldout",
                "exact_sources",
                "keep",
                "shapley_orders",
                "hierarchy_group",
                "hierarchy_keep",
                "batch_size",
                "n_shards",
                "seed",
            ],
        ),


use rule model_job as fit_learned_attention with:
    input:
        model_dir=at("results/models/generator"),
        train_path=shared("results/data/train.parquet"),
    output:
        weights_path=at("results/generation/learned_attention.json"),
    log:
        at("results/logs/fit_learned_attention/fit_learned_attention.log"),
    benchmark:
        at("results/benchmarks/fit_learned_attention/fit_learned_attention.tsv")
    params:
        cfg=keys(
            model=["device"],
            attribution=["target"],
            generation=[
                "sources",
                "template",
                "system_prompt",
                "max_new_tokens",
                "stop",
                "fit_score",
                "fit_end_token",
                "removal",
                "keep",
                "batch_size",
                "seed",
                "learned",
            ],
        ),


use rule model_job as explain_answers with:
    input:
        model_dir=at("results/models/generator"),
        responses_path=at("results/generation/responses.parquet"),
        ablations_path=at("results/generation/ablations/shard{shard}.parquet"),
        learned_path=learned_weights,
    output:
        scores_path=at("results/generation/scores/shard{shard}.parquet"),
    log:
        at("results/logs/explain_answers/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/explain_answers/shard{shard}.tsv")
    params:
        cfg=keys(
            model=["device"],
            generation=[
                "methods",
                "score",
                "fit_score",
                "fit_end_token",
                "pool_k",
                "trace_samples",
                "trace_keep",
                "ig_steps",
                "alpha",
                "batch_size",
                "n_shards",
                "seed",
            ],
        ),


use rule model_job as judge_answers with:
    input:
        model_dir=at("results/models/generator"),
        responses_path=at("results/generation/responses.parquet"),
        ablations_path=at("results/generation/ablations/shard{shard}.parquet"),
        scores_path=at("results/generation/scores/shard{shard}.parquet"),
    output:
        judged_path=at("results/generation/judged/shard{shard}.parquet"),
    log:
        at("results/logs/judge_answers/shard{shard}.log"),
    benchmark:
        at("results/benchmarks/judge_answers/shard{shard}.tsv")
    params:
        cfg=keys(
            model=["device"],
            generation=[
                "template",
                "system_prompt",
                "removal",
                "score",
                "top_k",
                "batch_size",
                "n_shards",
                "seed",
            ],
        ),


use rule model_job as answer_sanity with:
    input:
        model_dir=at("results/models/generator"),
        responses_path=at("results/generation/responses.parquet"),
        scores_paths=shards("generation", "results/generation/scores/shard{shard}.parquet"),
        learned_path=learned_weights,
    output:
        out_path=at("results/generation/sanity.parquet"),
    log:
        at("results/logs/answer_sanity/answer_sanity.log"),
    benchmark:
        at("results/benchmarks/answer_sanity/answer_sanity.tsv")
    params:
        cfg=keys(
            model=["device"],
            generation=[
                "methods",
                "template",
                "system_prompt",
                "score",
                "fit_score",
                "fit_end_token",
                "removal",
                "keep",
                "shapley_orders",
                "hierarchy_group",
                "hierarchy_keep",
                "n_ablations",
                "n_heldout",
                "pool_k",
                "trace_samples",
                "trace_keep",
                "ig_steps",
                "alpha",
                "batch_size",
                "seed",
            ],
            findings=["sanity_examples", "seed"],
        ),
