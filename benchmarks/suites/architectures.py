"""``architectures.json``: every architecture behind the model seam (Longformer, window 512; BigBird, blocks of
64, 3 random blocks; ModernBERT-base, 22 layers, window ±64) at 2 048, 4 096 and 8 192 tokens, base-size,
random weights: attnlens's forward, its
forward with every layer's bands, the band summaries ÷ that forward (target ≤ 0.5) and the peak extra memory
÷ the dense ``layers · heads · n² · 4`` bytes (target ≤ 5 %), beside Hugging Face's own forward and its
``output_attentions`` forward where those outputs fit in 8 GiB (BigBird's builds the dense probabilities in
every block-sparse forward; ModernBERT's needs eager attention).
"""

from __future__ import annotations

import os
import time
from functools import partial

import torch

from attnlens.attention.band import Band
from attnlens.attention.summaries import compute_example_summaries
from attnlens.models import architecture, forward_bands
from benchmarks.measuring import STRICT_MALLOC, bench_child, measure, measured, over
from benchmarks.records import span, thousands, write_record
from benchmarks.shapes import base_bigbird, base_longformer_long, base_modernbert
from benchmarks.suites.attention import tiny_band

#: Base-size random-weight models of every architecture behind the seam (Longformer: window 512, CLS global).
BASE_MODELS = {"longformer": lambda: base_longformer_long(8192), "bigbird": base_bigbird, "modernbert": base_modernbert}


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
            _, seconds, peak = measured(lambda: model(**batch))
            row["huggingface_forward_s"] = round(seconds, 2)
            row["huggingface_forward_peak_extra_over_dense"] = over(peak, dense)
            if name == "longformer" or dense <= HF_ATTENTIONS_LIMIT:  # Longformer's outputs are bands
                hf = base_modernbert(implementation="eager") if name == "modernbert" else model
                seconds, peak = measure(lambda: hf(**batch, output_attentions=True))
                row["huggingface_attentions_s"] = round(seconds, 2)
                row["huggingface_peak_extra_over_dense"] = over(peak, dense)
                del hf
            else:
                row["huggingface_attentions_s"] = f"not run: its dense outputs ({dense / 2**30:.0f} GiB) do not fit"
        arch.prepare(model)
        model(**batch)  # warm-up of the patched path
        t0 = time.perf_counter()
        model(**batch)
        row["forward_s"] = round(time.perf_counter() - t0, 2)
        bands, seconds, forward_peak = measured(lambda: forward_bands(model, batch))
        row["forward_with_bands_s"] = round(seconds, 2)
        band_bytes = sum(t.numel() * t.element_size() for b in bands for t in _layer_tensors(b))
        first_band = next(b for b in bands if isinstance(b, Band))
        compute_example_summaries([tiny_band(first_band)], k)  # the kernels' first call
        seconds, peak = measure(partial(compute_example_summaries, bands, k))
        row["summaries_s"] = round(seconds, 2)
        del bands
    row["summaries_over_forward"] = round(row["summaries_s"] / row["forward_with_bands_s"], 3)
    row["summaries_over_forward_target"] = 0.5
    row["peak_extra_over_dense"] = over(peak, dense)
    row["peak_extra_over_dense_target"] = 0.05
    row["bands_over_dense"] = round(band_bytes / dense, 4)
    row["forward_with_bands_peak_extra_over_dense"] = over(forward_peak, dense)
    row["memory_method"] = (
        "peak RSS (VmHWM reset) minus RSS before: of the summaries, every layer's bands already in memory (as in "
        "attention.json); of the forward that returns the bands (bands included); bands_over_dense: their bytes"
    )
    return row


def bench_architectures(lengths=(2048, 4096, 8192), names=tuple(BASE_MODELS)) -> list[dict]:
    """Every architecture at every length, each in a fresh interpreter with strict memory accounting
    (``MALLOC_MMAP_THRESHOLD_``, as :func:`bench_attention`): one run gives times and memory (ModernBERT-base at
    8 192 tokens is minutes per forward on 2 cores; the strict allocator's cost is in both sides' times)."""
    strict = {**os.environ, **STRICT_MALLOC}
    return [
        bench_child("architectures", "bench_architecture_length", n, strict, name) for name in names for n in lengths
    ]


def record(result: dict) -> None:
    """The record ``architectures`` (benchmarks.records): each architecture's summaries over its forward, and the
    largest peak memory against the dense attention's, over the lengths run."""
    rows = [r for r in result["lengths"] if "summaries_over_forward" in r]
    names = list(dict.fromkeys(r["architecture"] for r in rows))
    per = {n: [r["summaries_over_forward"] for r in rows if r["architecture"] == n] for n in names}
    dense = [100 * r["peak_extra_over_dense"] for r in rows if r["peak_extra_over_dense"] is not None]
    longest = max(r["tokens"] for r in rows)
    write_record(
        "architectures",
        f"… for every encoder architecture, up to {longest:,} tokens?".replace(",", " "),
        ", ".join(f"{n} {span(v, 2)} ×" for n, v in per.items()) + f" the forward; ≤ {max(dense):.1f} % of dense",
        "[`architectures.json`](#architecturesjson)",
        "benchmarks.suites.architectures",
        {"summaries_over_forward": per, "peak_extra_over_dense_max": max(dense) / 100, "longest": longest},
        tables={"lengths": {"header": HEADER, "rows": [_row(r) for r in rows]}},
        provenance=result.get("provenance"),
    )


HEADER = [
    "model",
    "tokens",
    "HF forward",
    "HF forward, peak / dense",
    "attnlens forward with attention",
    "summaries",
    "summaries ÷ forward (≤ 0.5)",
    "summaries' peak / dense (≤ 5 %)",
    "every layer's attention kept / dense",
]


def _share(value) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _seconds(value) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) else "–"


def _row(r: dict) -> list[str]:
    return [
        r["architecture"],
        thousands(r["tokens"]),
        _seconds(r.get("huggingface_forward_s")),
        _share(r.get("huggingface_forward_peak_extra_over_dense")),
        _seconds(r["forward_with_bands_s"]),
        _seconds(r["summaries_s"]),
        f"{r['summaries_over_forward']:.2f}",
        _share(r["peak_extra_over_dense"]),
        _share(r["bands_over_dense"]),
    ]
