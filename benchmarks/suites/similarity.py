"""``similarity.json``: comparison of one 2 048-token example (12 layers × 12 heads, every
configuration × scaled × mask × mode, 100 permutations each; target ≤ 1 s) and aggregation of 1 000
synthetic examples' rows into Tables 1–2, tests and summary (target ≤ 30 s).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attnlens.data.sources import MANIFEST_SCHEMA
from attnlens.io import provenance, save_json, save_parquet
from attnlens.pipeline.config import SimilarityConfig
from attnlens.similarity.metrics import SIMILARITY_SCHEMA, compare_example, head_agreement
from attnlens.stages.report import run_aggregate_similarity
from benchmarks.records import write_record


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


def record(result: dict) -> None:
    """The record ``similarity`` (benchmarks.records): one document's comparison, and the aggregation of many."""
    write_record(
        "similarity",
        "What does the similarity study cost?",
        f"{result['compare_seconds']:.2f} s per {result['tokens']}-token document; {result['aggregate_seconds']:.1f} s "
        f"to aggregate {result['aggregate_examples']}",
        "[`similarity.json`](#similarityjson)",
        "benchmarks.suites.similarity",
        {k: result[k] for k in ("tokens", "compare_seconds", "aggregate_examples", "aggregate_seconds")},
        tables={"costs": {"header": ["what", "measured", "target"], "rows": _rows(result)}},
        provenance=result.get("provenance"),
    )


def _rows(r: dict) -> list[list[str]]:
    compare = (
        f"`compare` of one {r['tokens']}-token example: {r['rows_per_example']} values, each also on "
        f"{r['n_permutations']} permuted attributions"
    )
    aggregate = f"`aggregate_similarity` over {r['aggregate_examples']} examples ({r['aggregate_rows']} rows)"
    return [
        [
            compare,
            f"{r['compare_seconds']:.2f} s (+ {r['head_agreement_seconds']:.2f} s per-head agreement)",
            f"≤ {r['compare_target_seconds']:g} s",
        ],
        [aggregate, f"{r['aggregate_seconds']:.2f} s", f"≤ {r['aggregate_target_seconds']:g} s"],
    ]
