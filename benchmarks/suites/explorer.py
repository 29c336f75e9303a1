"""``explorer.json``: size and build time of one explorer page for a 4 096-token document with 144 heads of
trained attention (the packaged MiniLM's layers used twice, as a Longformer), at each top-k of the attention
views: page megabytes (target ≤ 10 MB), deflated data, the views' and the encoding's seconds.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
)

from attnlens.data.corpus import generate_corpus
from attnlens.models import forward_bands
from attnlens.models.checkpoints import packaged_model_dir
from attnlens.models.loading import build_base_model
from attnlens.pipeline.config import ModelConfig, SyntheticConfig
from attnlens.render.explorer import ExplorerDocument, compute_views, payload, render_explorer
from benchmarks.records import write_record


def _minilm_longformer_12(max_length: int, window: int = 512):
    """The packaged MiniLM's 6 layers used twice, as a Longformer: 12 layers × 12 heads of trained attention (the
    12-layer BERT saved and converted as ``model.source: convert_bert`` converts a checkpoint)."""

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
    with tempfile.TemporaryDirectory() as tmp:
        big.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        cfg = {"source": "convert_bert", "name_or_path": tmp, "max_length": max_length, "attention_window": window}
        return build_base_model(ModelConfig.from_dict(cfg), num_labels=2)


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
            example_id="bench",
            title="bench",
            info={"explained": "class 1", "ig_steps": 0, "ig_delta": 0.0},  # what the page names of its IG row
            tokens=tokens,
            starts_word=[True] * length,
            special=np.zeros(length, dtype=bool),
            attribution=np.zeros(length, dtype=np.float32),
            evidence=np.zeros(length, dtype=bool),
            importance=importance.numpy(),
            views=views,
            provenance={},
        )
        t0 = time.perf_counter()
        meta, blob = payload(doc)
        page = render_explorer(meta, blob)
        encode_s = time.perf_counter() - t0
        rows.append(
            {
                "top_k": k,
                "page_mb": round(len(page.encode()) / 1e6, 2),
                "data_deflated_mb": round(len(blob) / 1e6, 2),
                "views_s": round(views_s, 1),
                "encode_s": round(encode_s, 1),
            }
        )
    return {
        "tokens": length,
        "heads": 144,
        "views": len(views.received),
        "forward_s": round(forward_s, 1),
        "target_mb": 10.0,
        "pages": rows,
    }


def record(result: dict) -> None:
    """The record ``explorer`` (benchmarks.records): the page's size at the smallest top-k."""
    page = min(result["pages"], key=lambda p: p["top_k"])
    write_record(
        "explorer",
        "How large is an explorer page?",
        f"{page['page_mb']:.2f} MB for {result['tokens']} tokens × {result['heads']} heads at `top_k: {page['top_k']}`",
        "[`explorer.json`](#explorerjson)",
        "benchmarks.suites.explorer",
        {"page_mb": page["page_mb"], "tokens": result["tokens"], "top_k": page["top_k"]},
        tables={
            "pages": {
                "header": ["top_k", "page", "deflated data", "views from the bands", "encode + render"],
                "rows": [
                    [
                        str(p["top_k"]),
                        f"{p['page_mb']:.2f} MB",
                        f"{p['data_deflated_mb']:.2f} MB",
                        f"{p['views_s']:.1f} s",
                        f"{p['encode_s']:.1f} s",
                    ]
                    for p in result["pages"]
                ],
            }
        },
        provenance=result.get("provenance"),
    )
