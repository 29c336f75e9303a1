"""``targets.json``: what a second explained output costs (docs/tasks.md, "Targets").

A multi-label document is explained once per explained label. For IG and AttnLRP, on the default model's shape
with a four-label multi-label head, at the default length and at 4 096 tokens: the seconds to explain ``K`` labels
of one document (one call per label, as rule ``attribute`` and the API make them) against one label, so
``ratio_k_over_one`` says how close a label's cost is to a whole document's (``K`` = no sharing at all).

IG runs fixed Gauss–Legendre steps (no adaptive rounds, so every label does the same work; :data:`LENGTHS`); the
times are medians of ``repeats`` calls after one warm-up call of one label.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from measuring import resolved_model

from attnlens.attribution.attnlrp import attnlrp
from attnlens.attribution.ig import attribute_example, prepare_inputs
from attnlens.config import ModelConfig, load_config
from attnlens.models.loading import build_base_model
from attnlens.tasks import MULTILABEL

#: the multi-label default's labels (attnlens.corpus.TOPIC_NAMES)
N_LABELS = 4


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_length(cfg: ModelConfig, length: int, n_steps: int = 32, internal_batch_size: int = 8,
                 repeats: int = 1) -> dict:  # fmt: skip
    """IG and AttnLRP of 1 and :data:`N_LABELS` labels of one random document of ``length`` tokens."""
    cfg = ModelConfig.from_dict({**cfg.to_dict(), "max_length": length})
    model, tokenizer = build_base_model(cfg, MULTILABEL.n_outputs(N_LABELS))
    model.config.problem_type = MULTILABEL.problem_type
    model.eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (length,), generator=generator).tolist()
    ids[0], ids[-1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    inputs = prepare_inputs(model, tokenizer, ids)

    def ig(k: int):
        for target in range(k):
            attribute_example(model, inputs, target, min_steps=n_steps, max_steps=n_steps, tolerance=None,
                              internal_batch_size=internal_batch_size)  # fmt: skip

    def lrp(k: int):
        for target in range(k):
            attnlrp(model, inputs, target)

    out = {"tokens": length, "labels": N_LABELS, "n_steps": n_steps, "internal_batch_size": internal_batch_size}
    for name, fn in (("ig", ig), ("attnlrp", lrp)):
        fn(1)  # warm-up: allocator and kernel caches
        one = _median_seconds(lambda fn=fn: fn(1), repeats)
        many = _median_seconds(lambda fn=fn: fn(N_LABELS), repeats)
        out[name] = {"one_label_s": round(one, 3), f"{N_LABELS}_labels_s": round(many, 3),
                     "ratio_k_over_one": round(many / one, 3)}  # fmt: skip
    return out


#: ``(length, IG steps)``: ``None`` is the default model's own length, at the default's step budget; at 4 096 tokens
#: one batch of 8 steps (32 steps there take minutes a label on 2 cores; the ratio is per call, whatever the steps)
LENGTHS = ((None, 32), (4096, 8))


def run(config_path: str, lengths: tuple[tuple[int | None, int], ...] = LENGTHS) -> dict:
    """Every length on this machine's threads."""
    cfg = resolved_model(load_config(config_path)["model"])
    rows = []
    for length, steps in lengths:
        rows.append(bench_length(cfg, length or cfg.max_length, n_steps=steps))
        print(f"targets: {rows[-1]}", file=sys.stderr, flush=True)
    return {"threads": torch.get_num_threads(), "lengths": rows}
