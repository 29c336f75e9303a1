"""``targets.json``: what a second explained output costs (docs/tasks.md, "Targets").

A multi-label document is explained once per explained label. For IG and AttnLRP, on the default model's shape
with a four-label multi-label head, at the default length and at 4 096 tokens: the seconds to explain ``K`` labels
of one document (one call per label, as rule ``attribute`` and the API make them) against one label, so
``ratio_k_over_one`` says how close a label's cost is to a whole document's (``K`` = no sharing at all).

A question's answer span is one target, but a reader's question tokens are all global (Longformer's QA
convention), and its explained scalar is the span distribution's: ``qa`` times IG and AttnLRP of one span of a
reader with a :data:`QUESTION_TOKENS`-token question, beside the same document as a classifier with ``[CLS]`` alone
global (``ratio_over_classification``), so a QA explanation's cost is stated against a class's.

IG runs fixed Gauss–Legendre steps (no adaptive rounds, so every label does the same work; :data:`LENGTHS`); the
times are medians of ``repeats`` calls after one warm-up call of one label.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from attnlens.attribution.ig import attribute_example, prepare_inputs
from attnlens.attribution.lrp import attnlrp
from attnlens.models.loading import build_base_model
from attnlens.pipeline.config import ModelConfig, load_config
from attnlens.tasks import CLASSIFICATION, MULTILABEL, QA
from attnlens.tasks.spans import span_index
from benchmarks.measuring import resolved_model
from benchmarks.records import span, thousands, write_record

#: the multi-label default's labels (attnlens.data.corpus.TOPIC_NAMES)
N_LABELS = 4
#: a question's tokens, [CLS] and [SEP] included (the generated questions run to 12-16 tokens, HotpotQA's to ~20)
QUESTION_TOKENS = 20


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_length(
    cfg: ModelConfig, length: int, n_steps: int = 32, internal_batch_size: int = 8, repeats: int = 1
) -> dict:
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
            attribute_example(
                model,
                inputs,
                target,
                min_steps=n_steps,
                max_steps=n_steps,
                tolerance=None,
                internal_batch_size=internal_batch_size,
            )

    def lrp(k: int):
        for target in range(k):
            attnlrp(model, inputs, target)

    out = {"tokens": length, "labels": N_LABELS, "n_steps": n_steps, "internal_batch_size": internal_batch_size}
    for name, fn in (("ig", ig), ("attnlrp", lrp)):
        fn(1)  # warm-up: allocator and kernel caches
        one = _median_seconds(lambda fn=fn: fn(1), repeats)
        many = _median_seconds(lambda fn=fn: fn(N_LABELS), repeats)
        out[name] = {
            "one_label_s": round(one, 3),
            f"{N_LABELS}_labels_s": round(many, 3),
            "ratio_k_over_one": round(many / one, 3),
        }
    out["qa"] = bench_span(cfg, ids, n_steps, internal_batch_size, repeats)
    return out


def bench_span(cfg: ModelConfig, ids: list[int], n_steps: int, internal_batch_size: int, repeats: int) -> dict:
    """IG and AttnLRP of one answer span of a reader whose first :data:`QUESTION_TOKENS` tokens are a question
    (global), against one class of the same document read by a classifier (``[CLS]`` global)."""
    question = list(ids)
    model, tokenizer = build_base_model(cfg, CLASSIFICATION.n_outputs(2))
    question[QUESTION_TOKENS - 1] = tokenizer.sep_token_id  # [CLS] question [SEP] context [SEP]
    reader = build_base_model(cfg, QA.n_outputs(0), head=QA.head)[0]
    reader.config.problem_type = QA.problem_type  # as rule train_model saves a reader
    readers = {"classification": (model.eval(), 1), "qa": (reader.eval(), span_index(40, 42))}
    out = {"question_tokens": QUESTION_TOKENS}
    for task, (reader, target) in readers.items():
        inputs = prepare_inputs(reader, tokenizer, question)
        calls = {
            "ig": lambda reader=reader, inputs=inputs, target=target: attribute_example(
                reader,
                inputs,
                target,
                min_steps=n_steps,
                max_steps=n_steps,
                tolerance=None,
                internal_batch_size=internal_batch_size,
            ),
            "attnlrp": lambda reader=reader, inputs=inputs, target=target: attnlrp(reader, inputs, target),
        }
        for name, fn in calls.items():
            fn()  # warm-up
            out.setdefault(name, {})[f"{task}_s"] = round(_median_seconds(fn, repeats), 3)
    for name in ("ig", "attnlrp"):
        out[name]["ratio_over_classification"] = round(out[name]["qa_s"] / out[name]["classification_s"], 3)
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


def record(result: dict) -> None:
    """The record ``targets`` (benchmarks.records): N labels explained against one, for IG and AttnLRP, and an answer
    span against a class of the same document."""
    rows = result["lengths"]
    ig, lrp = [r["ig"]["ratio_k_over_one"] for r in rows], [r["attnlrp"]["ratio_k_over_one"] for r in rows]
    span_ratio = [r["qa"][m]["ratio_over_classification"] for r in rows for m in ("ig", "attnlrp")]
    write_record(
        "targets",
        "What does a second explained output cost?",
        f"a whole explanation each ({N_LABELS} labels: {span(ig, 2)} × IG, {span(lrp, 2)} × AttnLRP); an answer span "
        f"{span(span_ratio, 2)} × a class",
        "[`targets.json`](#targetsjson)",
        "benchmarks.suites.targets",
        {"ig_k_over_one": ig, "attnlrp_k_over_one": lrp, "span_over_class": span_ratio, "labels": N_LABELS},
        tables={
            "labels": {"header": LABEL_HEADER, "rows": [_label_row(r) for r in rows]},
            "spans": {"header": SPAN_HEADER, "rows": [_span_row(r) for r in rows]},
        },
        provenance=result.get("provenance"),
    )


LABEL_HEADER = [
    "tokens",
    "IG steps",
    "IG, 1 label",
    f"IG, {N_LABELS} labels",
    "ratio",
    "AttnLRP, 1 label",
    f"AttnLRP, {N_LABELS} labels",
    "ratio",
]
SPAN_HEADER = [
    "tokens",
    "IG, a class",
    "IG, an answer span",
    "ratio",
    "AttnLRP, a class",
    "AttnLRP, an answer span",
    "ratio",
]


def _label_row(r: dict) -> list[str]:
    ig, lrp = r["ig"], r["attnlrp"]
    return [
        thousands(r["tokens"]),
        str(r["n_steps"]),
        f"{ig['one_label_s']:.2f} s",
        f"{ig[f'{N_LABELS}_labels_s']:.2f} s",
        f"{ig['ratio_k_over_one']:.2f}",
        f"{lrp['one_label_s']:.3f} s",
        f"{lrp[f'{N_LABELS}_labels_s']:.3f} s",
        f"{lrp['ratio_k_over_one']:.2f}",
    ]


def _span_row(r: dict) -> list[str]:
    ig, lrp = r["qa"]["ig"], r["qa"]["attnlrp"]
    return [
        thousands(r["tokens"]),
        f"{ig['classification_s']:.2f} s",
        f"{ig['qa_s']:.2f} s",
        f"{ig['ratio_over_classification']:.2f}",
        f"{lrp['classification_s']:.3f} s",
        f"{lrp['qa_s']:.3f} s",
        f"{lrp['ratio_over_classification']:.2f}",
    ]
