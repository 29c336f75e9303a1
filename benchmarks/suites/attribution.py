"""``attribution.json``:

* ``throughput``: IG wall time at the default model size against ``n_steps`` × one forward+backward
  at batch 1 (target ≤ 1.0);
* ``adaptive``: on the default test set (after ``make run``), the steps the doubling schedule needs to
  reach ``|δ| ≤ 1 % · |F(x) − F(x′)|``, against the paper's fixed 500.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from attnlens.attribution.ig import (
    attribute_example,
    endpoint_probs,
    prepare_inputs,
)
from attnlens.classifier.prediction import encode_texts
from attnlens.data.sources import load_examples
from attnlens.models.checkpoints import load_classifier
from attnlens.models.loading import build_base_model
from attnlens.pipeline.config import ModelConfig, load_config
from attnlens.tasks import CLASSIFICATION
from benchmarks.measuring import ROOT, resolved_model
from benchmarks.records import thousands, write_record


def _ig_input(cfg: ModelConfig, model, tokenizer):

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (cfg.max_length,), generator=generator).tolist()
    ids[0], ids[-1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    return prepare_inputs(model, tokenizer, ids)


def bench_ig_throughput(cfg: ModelConfig, n_steps: int = 32, internal_batch_size: int = 8, repeats: int = 3) -> dict:
    """IG wall time against ``n_steps`` × one forward+backward at batch 1, on the default model size.

    Two references: the plain training-style step (``loss.backward()`` with parameter gradients,
    what "one forward+backward" usually means) and the lean step IG actually needs (gradient of the
    class probability with respect to the embedding output only, parameters frozen).
    """

    model, tokenizer = build_base_model(cfg, num_labels=2)
    inputs = _ig_input(cfg, model, tokenizer)
    args = inputs.forward_kwargs()

    def plain_step():
        model.zero_grad(set_to_none=True)
        model(input_ids=inputs.input_ids, **args).logits.softmax(-1)[0, 1].backward()

    def lean_step():
        leaf = {}

        def hook(_module, _inp, out):  # the embedding output becomes the leaf we differentiate to
            leaf["e"] = out.detach().requires_grad_(True)
            return leaf["e"]

        handle = model.longformer.embeddings.register_forward_hook(hook)
        try:
            prob = inputs.readout_forward(model)(inputs.input_ids, *inputs.forward_args)[0, 1]
            torch.autograd.grad(prob, leaf["e"])
        finally:
            handle.remove()

    def median_time(fn, k=repeats):
        times = []
        for _ in range(k + 1):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])

    plain = median_time(plain_step)
    for p in model.parameters():
        p.requires_grad_(False)
    lean = median_time(lean_step)
    ig = median_time(
        lambda: attribute_example(
            model,
            inputs,
            1,
            min_steps=n_steps,
            max_steps=n_steps,
            tolerance=None,
            internal_batch_size=internal_batch_size,
        ),
        k=2,
    )
    return {
        "tokens": cfg.max_length,
        "n_steps": n_steps,
        "internal_batch_size": internal_batch_size,
        "ig_s": round(ig, 3),
        "forward_backward_batch1_s": round(plain, 4),
        "forward_backward_input_grad_only_s": round(lean, 4),
        "ig_over_steps_x_forward_backward": round(ig / (n_steps * plain), 3),
        "ig_over_steps_x_input_grad_step": round(ig / (n_steps * lean), 3),
        "target": 1.0,
        "threads": torch.get_num_threads(),
    }


def bench_adaptive_steps(
    model_dir: Path, test_path: Path, tolerance: float = 0.01, max_steps: int = 512, max_examples: int | None = 12
) -> dict:
    """Steps the doubling schedule (from 4) needs to reach ``|δ| ≤ tolerance · |gap|`` on the default test set.

    Needs the trained default model and test split (``make run`` first); the examples are the
    first ``max_examples`` by id. Compared with the paper's fixed 500 steps per showcased example.
    """

    model, tokenizer = load_classifier(model_dir)
    examples, _ = load_examples(test_path)
    examples = examples.sort_values("example_id").head(max_examples)
    encoded = encode_texts(tokenizer, examples["text"])
    rows = []
    for eid, ids in zip(examples["example_id"], encoded.input_ids, strict=True):
        inputs = prepare_inputs(model, tokenizer, ids)
        forward = inputs.readout_forward(model)
        probs, _ = endpoint_probs(forward, inputs.input_ids, inputs.baseline, inputs.forward_args)
        t0 = time.perf_counter()
        res = attribute_example(
            model,
            inputs,
            CLASSIFICATION.targets("predicted", 0, probs)[0],
            min_steps=4,
            max_steps=max_steps,
            tolerance=tolerance,
            internal_batch_size=8,
        )
        rows.append(
            {
                "example_id": str(eid),
                "tokens": len(ids),
                "steps_needed": res.n_steps if res.converged else None,
                "relative_delta": abs(res.delta) / abs(res.gap) if res.gap else None,
                "seconds_all_rounds": round(time.perf_counter() - t0, 2),
                "rounds": [[s, round(d, 6)] for s, d in res.rounds],
            }
        )
    needed = [r["steps_needed"] for r in rows if r["steps_needed"] is not None]
    return {
        "tolerance": tolerance,
        "max_steps": max_steps,
        "examples": len(rows),
        "converged": len(needed),
        "steps_needed_histogram": {str(s): needed.count(s) for s in sorted(set(needed))},
        "median_steps_needed": statistics.median(needed) if needed else None,
        "paper_fixed_steps": 500,
        "median_steps_over_paper": round(statistics.median(needed) / 500, 4) if needed else None,
        "per_example": rows,
    }


def run(config_path: str) -> dict:
    cfg = load_config(config_path)
    result = {"throughput": bench_ig_throughput(resolved_model(cfg["model"]))}
    model_dir, test = ROOT / "results/models/finetuned", ROOT / "results/data/test.parquet"
    if model_dir.exists() and test.exists():
        result["adaptive"] = bench_adaptive_steps(model_dir, test)
    else:
        result["adaptive"] = "skipped: run `make run` first (needs the trained default model and test split)"
    return result


def record(result: dict) -> None:
    """The record ``ig_step`` (benchmarks.records): IG's steps against as many plain forward + backward passes."""
    t = result["throughput"]
    write_record(
        "ig_step",
        "Is IG's step as cheap as a plain forward + backward?",
        f"{t['n_steps']} steps in batches of {t['internal_batch_size']}: {t['ig_over_steps_x_forward_backward']:.2f} × "
        f"{t['n_steps']} passes with parameter gradients ({t['tokens']} tokens)",
        "[`attribution.json`](#attributionjson)",
        "benchmarks.suites.attribution",
        {k: t[k] for k in ("tokens", "n_steps", "internal_batch_size", "ig_over_steps_x_forward_backward")},
        tables={
            "throughput": {
                "header": HEADER,
                "rows": [
                    [
                        thousands(t["tokens"]),
                        f"{t['n_steps']} in batches of {t['internal_batch_size']}",
                        f"{t['ig_s']:.2f} s",
                        f"{t['ig_over_steps_x_forward_backward']:.2f}",
                        f"{t['ig_over_steps_x_input_grad_step']:.2f}",
                    ]
                ],
            }
        },
        provenance=result.get("provenance"),
    )


HEADER = [
    "tokens",
    "IG steps",
    "IG",
    "÷ as many forward + backward passes (target ≤ 1)",
    "÷ as many passes with frozen parameters",
]
