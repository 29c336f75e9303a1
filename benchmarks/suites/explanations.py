"""``explanations.json``: the attention-based explanation methods (raw attention, value norms, rollout,
gradient-weighted attention) on the base-size configuration at 2 048 and 4 096 tokens: each one's
time beyond the forward pass that gives the attention (target ≤ 1 × one forward) and its peak extra
memory against the dense ``144 · n² · 4`` bytes (target ≤ 5 %); rollout's memory against depth next to
the non-zeros of the full rollout matrix; the forward + backward the gradient methods share, where it
fits; and, after ``make run``, the share of the default run the whole comparison takes (target ≤ 25 %).
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

from attnlens.attention.weighted import rollout
from attnlens.attribution.explanations import (
    Attention,
    Example,
    Gradients,
    attention_pass,
    grad_attention_score,
    gradient_pass,
)
from attnlens.attribution.ig import (
    Inputs,
    freeze,
)
from attnlens.attribution.methods import DOCUMENT, REGISTRY, ranking_source
from attnlens.models import architecture
from attnlens.pipeline.config import load_config
from benchmarks.measuring import ROOT, STRICT_MALLOC, bench_child, measure
from benchmarks.records import thousands, write_record
from benchmarks.shapes import base_longformer


def rollout_nonzeros(n: int, window: int, depth: int) -> list[int]:
    """Non-zeros of the full rollout matrix ``Ã_l ⋯ Ã_1`` for l = 1 … depth (sliding window + CLS global)."""
    half = window // 2
    offsets = list(range(-half, half + 1))
    band = sparse.diags([np.ones(n - abs(k), dtype=np.float32) for k in offsets], offsets, shape=(n, n), format="csr")
    cls = np.r_[np.zeros(n, dtype=np.int64), np.arange(n)], np.r_[np.arange(n), np.zeros(n, dtype=np.int64)]
    glob = sparse.csr_matrix((np.ones(2 * n, dtype=np.float32), cls), shape=(n, n))
    step = ((band + glob) > 0).astype(np.float32)
    product, out = step, [int(step.nnz)]
    for _ in range(1, depth):
        if out[-1] == n * n:  # dense: every further product stays dense
            out.append(n * n)
            continue
        product = ((step @ product) > 0).astype(np.float32)
        out.append(int(product.nnz))
    return out


def _method_row(seconds: float, peak: int | None, forward: float, dense: int) -> dict:
    return {
        "seconds": round(seconds, 3),
        "over_forward": round(seconds / forward, 3),
        "peak_extra_bytes": peak,
        "peak_extra_over_dense": None if peak is None else round(peak / dense, 4),
    }


def _attention_methods(model, inputs: Inputs, bands, hidden, forward: float, dense: int, seed: int) -> dict:
    """Time and peak extra memory of each attention-based method (its registered scorer), the attention already
    in memory."""
    methods = {}
    example = Example(model, inputs, 1, layers="all")
    for method in ("attention_all", "value_norm", "rollout"):
        scorer = REGISTRY[method].scorers[DOCUMENT]
        seconds, peak = measure(lambda f=scorer: f(example, Attention(bands, hidden)))
        methods[method] = _method_row(seconds, peak, forward, dense)
    # gradient-weighted attention from ∂F/∂o of the right shape: its own cost, whatever gave the gradient
    g = torch.Generator().manual_seed(seed)
    grads = Gradients(bands=bands, hidden=hidden, output_grads=[torch.randn(h.shape, generator=g) for h in hidden])
    seconds, peak = measure(lambda: grad_attention_score(model, grads, "all"))
    methods["grad_attention"] = _method_row(seconds, peak, forward, dense)
    methods["grad_attention"]["note"] = "after its own forward + backward with hooks on the attention outputs"
    return methods


def _rollout_depths(bands, window: int) -> dict:
    """Rollout's time and peak extra memory through the top ``d`` layers, and the full matrix's non-zeros."""
    depths = sorted({1, 2, 4, 8, len(bands)} & set(range(1, len(bands) + 1)))
    nonzeros = rollout_nonzeros(bands[0].n, window, len(bands))
    out = {}
    for d in depths:
        seconds, peak = measure(lambda d=d: rollout(bands[-d:]))
        out[d] = {
            "seconds": round(seconds, 3),
            "peak_extra_bytes": peak,
            "full_matrix_nonzeros": nonzeros[d - 1],
            "full_matrix_float32_bytes": nonzeros[d - 1] * 4,
        }
    return out


def bench_explanations_length(n: int, seed: int = 0, backward_max: int = 4096) -> dict:
    """One length, in this process: the attention pass, every attention-based method, rollout by depth,
    and (up to ``backward_max`` tokens) the forward + backward the gradient methods share."""
    model = freeze(base_longformer(seed))
    config = model.config
    ids = torch.randint(5, config.vocab_size, (1, n))
    ids[0, 0] = config.bos_token_id
    mask = torch.ones_like(ids)
    arch = architecture(model)
    inputs = Inputs(ids, ids, mask, arch.position_ids(model.config, n), arch.forward_args(mask))
    args = {"input_ids": ids, **inputs.forward_kwargs()}
    with torch.no_grad():
        model(**args)
        t0 = time.perf_counter()
        model(**args)
        forward = time.perf_counter() - t0
    t0 = time.perf_counter()
    bands, hidden = attention_pass(model, args)
    attention_forward = time.perf_counter() - t0
    dense = config.num_hidden_layers * config.num_attention_heads * n * n * 4
    methods = _attention_methods(model, inputs, bands, hidden, forward, dense, seed)
    depth = _rollout_depths(bands, config.attention_window[0])
    bands.clear()
    hidden.clear()
    gc.collect()
    backward = {"skipped": f"longer than {backward_max} tokens"}
    if n <= backward_max:
        seconds, peak = measure(lambda: gradient_pass(model, args, 1, attentions=True))
        backward = {"seconds": round(seconds, 3), "over_forward": round(seconds / forward, 3), "peak_extra_bytes": peak}
    return {
        "tokens": n,
        "layers_x_heads": config.num_hidden_layers * config.num_attention_heads,
        "window": config.attention_window[0],
        "forward_s": round(forward, 3),
        "forward_with_attentions_s": round(attention_forward, 3),
        "dense_bytes": dense,
        "methods": methods,
        "extra_time_target_over_forward": 1.0,
        "extra_memory_target_over_dense": 0.05,
        "rollout_by_depth": depth,
        "forward_backward": backward,
    }


def _run_share(results: Path) -> dict | str:
    """The comparison's share of the last default run (``results/benchmarks``): its own rules, the extra
    rankings' part of ``evaluate_faithfulness`` (its forwards per ranking are alike) and the rest."""
    tsvs = {f"{t.parent.name}/{t.stem}": t for t in (results / "benchmarks").rglob("*.tsv")}
    if not tsvs:
        return "skipped: run `make run` first"
    seconds = {k: float(t.read_text().splitlines()[1].split("\t")[0]) for k, t in tsvs.items()}
    cfg = load_config(ROOT / "config" / "config.yaml")
    rankings = cfg["faithfulness"]["rankings"]
    new = [r for r in rankings if ranking_source(r) == "explain"]
    mine = ("explain", "explanation_leaderboard", "evaluate_faithfulness")
    own = sum(v for k, v in seconds.items() if k.split("/")[0] in mine[:2])
    extra_faith = seconds.get("evaluate_faithfulness/evaluate_faithfulness", 0.0) * len(new) / len(rankings)
    comparison = own + extra_faith
    total = sum(seconds.values())
    return {
        "rules_s": {k: round(v, 1) for k, v in seconds.items() if k.split("/")[0] in mine},
        "comparison_s": round(comparison, 1),
        "all_rules_s": round(total, 1),
        "share_of_run_without_it": round(comparison / (total - comparison), 3),
        "share_target": 0.25,
        "method": "explain + explanation_leaderboard + evaluate_faithfulness x (explanation rankings / rankings), "
        "against the sum of every rule's benchmark seconds of the same run",
    }


def bench_explanations(lengths=(2048, 4096)) -> dict:
    """Each length in fresh interpreters: one run for the times, one with strict memory accounting."""
    out = []
    strict = {**os.environ, **STRICT_MALLOC}
    for n in lengths:
        timed = bench_child("explanations", "bench_explanations_length", n, dict(os.environ))
        memory = bench_child("explanations", "bench_explanations_length", n, strict)
        for name, m in timed["methods"].items():
            m["peak_extra_bytes"] = memory["methods"][name]["peak_extra_bytes"]
            m["peak_extra_over_dense"] = memory["methods"][name]["peak_extra_over_dense"]
        for d, row in timed["rollout_by_depth"].items():
            row["peak_extra_bytes"] = memory["rollout_by_depth"][d]["peak_extra_bytes"]
        if "peak_extra_bytes" in timed["forward_backward"]:
            timed["forward_backward"]["peak_extra_bytes"] = memory["forward_backward"]["peak_extra_bytes"]
        timed["memory_method"] = (
            "peak RSS (VmHWM reset via /proc/self/clear_refs) minus RSS before, attention already in memory; "
            "separate run with MALLOC_MMAP_THRESHOLD_=131072"
        )
        out.append(timed)
    return {"lengths": out, "default_run": _run_share(ROOT / "results")}


def record(result: dict) -> None:
    """The record ``explanation_methods`` (benchmarks.records): the attention-based methods' largest time over the
    forward and largest peak memory against the dense attention's, over the lengths run."""
    methods = [m for r in result["lengths"] for m in r["methods"].values()]
    times = [m["over_forward"] for m in methods if m.get("over_forward") is not None]
    memory = [100 * m["peak_extra_over_dense"] for m in methods if m.get("peak_extra_over_dense") is not None]
    write_record(
        "explanation_methods",
        "What do the attention-based explanation methods cost?",
        f"≤ {max(times):.2f} × the forward, ≤ {max(memory):.1f} % of dense",
        "[`explanations.json`](#explanationsjson)",
        "benchmarks.suites.explanations",
        {"over_forward_max": max(times), "peak_extra_over_dense_max": max(memory) / 100},
        tables={"methods": {"header": HEADER, "rows": [row for r in result["lengths"] for row in _rows(r)]}},
        provenance=result.get("provenance"),
    )


HEADER = [
    "tokens",
    "forward",
    "method",
    "extra time",
    "÷ forward (target ≤ 1)",
    "peak extra memory / dense 144·n²·4 B (target ≤ 5 %)",
]
LABELS = {
    "attention_all": "raw attention (all layers)",
    "value_norm": "value-norm weighting",
    "rollout": "rollout",
    "grad_attention": "gradient-weighted attention",
}


def _rows(r: dict) -> list[list[str]]:
    rows = []
    for i, (name, m) in enumerate(r["methods"].items()):
        memory = f"{m['peak_extra_bytes'] / 1e6:.0f} MB = {100 * m['peak_extra_over_dense']:.1f} %"
        first = [thousands(r["tokens"]), f"{r['forward_s']:.2f} s"] if i == 0 else ["", ""]
        rows.append([*first, LABELS.get(name, name), f"{m['seconds']:.2f} s", f"{m['over_forward']:.2f}", memory])
    return rows
