"""``topology.json``: per example at 512, 1 024 and 2 048 tokens (base-size configuration, chunks of 16
tokens): forward, pooling from the band, the three MI estimators with their Rips persistence (H0, H1),
seconds and peak extra memory; and all-pairs bottleneck distances of 100 examples (target ≤ 60 s).
"""

from __future__ import annotations

import gc
import time

import numpy as np
import torch

from attnlens.models import architecture, forward_bands
from attnlens.pipeline.config import TopologyConfig
from attnlens.topology.persistence import bottleneck_matrix, example_topology
from attnlens.topology.pooling import pooled_from_bands, unit_frequencies, units
from benchmarks.records import thousands, write_record
from benchmarks.shapes import base_longformer, reset_peak_rss, rss_kib


def bench_topology(lengths=(512, 1024, 2048), chunk_size: int = 16, n_pairs_examples: int = 100) -> dict:
    """Seconds and peak extra memory of the topology stage per example against length; all-pairs bottleneck."""

    cfg = TopologyConfig(chunk_size=chunk_size)
    model = base_longformer()
    rows = []
    for n in lengths:
        ids = torch.randint(5, 1000, (1, n))  # a 1 000-type vocabulary: repeated types, as in text
        ids[0, 0], ids[0, -1] = 0, 2
        mask = torch.ones_like(ids)
        batch = {"input_ids": ids, "attention_mask": mask, **architecture(model).forward_args(mask)}
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
        rows.append(
            {
                "tokens": n,
                "units": int(unit_of.max()) + 1,
                "forward_with_attentions_s": round(forward_s, 3),
                "pooling_s": round(pool_s, 3),
                "mi_and_persistence_s": round(topo_s, 3),
                "topology_s_per_example": round(pool_s + topo_s, 3),
                "peak_extra_bytes": peak,
                "h1_bars": {est: len(r[2][1]) for est, r in result.items()},
            }
        )
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


def record(result: dict) -> None:
    """The record ``topology`` (benchmarks.records): pooling, MI and persistence per example beside the forward."""
    rows = result["per_length"]
    lo, hi = rows[0], rows[-1]
    write_record(
        "topology",
        "What does the topology study cost?",
        f"{lo['topology_s_per_example']:.2f} s ({lo['tokens']} tokens) to {hi['topology_s_per_example']:.2f} s "
        f"({hi['tokens']}) per example beside the forward",
        "[`topology.json`](#topologyjson)",
        "benchmarks.suites.topology",
        {str(r["tokens"]): r["topology_s_per_example"] for r in rows},
        tables={
            "lengths": {"header": HEADER, "rows": [_row(r) for r in rows]},
            "bottleneck": {
                "header": ["texts", "pairs", "mean bars (H0, H1)", "all pairs", "target"],
                "rows": [
                    [
                        str(result["bottleneck_examples"]),
                        thousands(result["bottleneck_pairs"]),
                        f"{result['bottleneck_mean_bars']['0']:.0f}, {result['bottleneck_mean_bars']['1']:.0f}",
                        f"{result['bottleneck_all_pairs_s']:.1f} s",
                        f"≤ {result['bottleneck_target_s']:g} s",
                    ]
                ],
            },
        },
        provenance=result.get("provenance"),
    )


HEADER = [
    "tokens",
    "units",
    "forward with attentions",
    "pooling from the band",
    "MI + persistence (3 estimators)",
    "per example (without forward)",
    "peak extra memory",
]


def _row(r: dict) -> list[str]:
    return [
        thousands(r["tokens"]),
        str(r["units"]),
        f"{r['forward_with_attentions_s']:.2f} s",
        f"{r['pooling_s']:.2f} s",
        f"{r['mi_and_persistence_s']:.2f} s",
        f"{r['topology_s_per_example']:.2f} s",
        f"{r['peak_extra_bytes'] / 1e6:.0f} MB",
    ]
