"""``attention.json``: band-native summaries against the forward pass and the original loop (issue 3)."""

from __future__ import annotations

import os
import time

import torch

from attnlens.attention.band import Band
from attnlens.attention.summaries import compute_example_summaries
from attnlens.models import architecture, forward_bands
from benchmarks.measuring import STRICT_MALLOC, bench_child, measured
from benchmarks.records import span, thousands, write_record
from benchmarks.shapes import base_longformer


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


def tiny_band(band):
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
    batch = {"input_ids": ids, "attention_mask": mask, **architecture(model).forward_args(mask)}
    with torch.no_grad():
        model(**batch)  # warm-up
        t0 = time.perf_counter()
        model(**batch)
        forward_plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        bands = forward_bands(model, batch)
        forward_attn = time.perf_counter() - t0
    t0 = time.perf_counter()  # the top-k kernels' first call: compile, or load numba's on-disk cache
    compute_example_summaries([tiny_band(bands[0])], k)
    kernel_warmup = time.perf_counter() - t0
    summaries, ours, peak_extra = measured(lambda: compute_example_summaries(bands, k))
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


def bench_attention(lengths=(2048, 4096)) -> list[dict]:
    """Each length in fresh interpreters: one run for the times, one with strict memory accounting."""
    out = []
    strict = {**os.environ, **STRICT_MALLOC}
    for n in lengths:
        timed = bench_child("attention", "bench_attention_length", n, dict(os.environ))
        memory = bench_child("attention", "bench_attention_length", n, strict)
        for key in ("peak_extra_bytes", "peak_extra_over_dense", "memory_method"):
            timed[key] = memory[key]
        timed["memory_method"] += " (separate run, MALLOC_MMAP_THRESHOLD_=131072)"
        out.append(timed)
    return out


def record(result: dict) -> None:
    """The record ``attention_summaries`` (benchmarks.records): the summaries' time over the forward that gives the
    bands, and their peak memory against the dense attention's, over the lengths run."""
    rows = result["lengths"]
    tokens = [r["tokens"] for r in rows]
    over_dense = [100 * r["peak_extra_over_dense"] for r in rows if r["peak_extra_over_dense"] is not None]
    write_record(
        "attention_summaries",
        "What do the attention summaries cost beside the forward?",
        f"{span([r['summaries_over_forward'] for r in rows], 2)} × the forward, {span(over_dense, 1)} % of the dense "
        f"attention's memory ({span(tokens, 0)} tokens)",
        "[`attention.json`](#attentionjson)",
        "benchmarks.suites.attention",
        {str(r["tokens"]): {k: r[k] for k in ("summaries_over_forward", "peak_extra_over_dense")} for r in rows},
        tables={"lengths": {"header": HEADER, "rows": [_row(r) for r in rows]}},
        provenance=result.get("provenance"),
    )


HEADER = [
    "tokens",
    "forward (with attentions)",
    "summaries",
    "÷ forward (target ≤ 0.5)",
    "peak extra memory / dense 144·n²·4 B (target ≤ 5 %)",
    "original loop (extrapolated)",
    "speed-up",
]


def _row(r: dict) -> list[str]:
    share = 100 * r["peak_extra_over_dense"]
    memory = f"{r['peak_extra_bytes'] / 1e6:.0f} MB / {r['dense_bytes'] / 1e9:.2f} GB = {share:.1f} %"
    return [
        thousands(r["tokens"]),
        f"{r['forward_with_attentions_s']:.2f} s",
        f"{r['summaries_s']:.2f} s",
        f"{r['summaries_over_forward']:.2f}",
        memory,
        f"{r['legacy_all_heads_s_extrapolated']:.0f} s",
        f"{r['speedup_over_legacy']:.0f}×",
    ]
