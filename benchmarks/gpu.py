"""The GPU proof in one call: the paper's shape through every classification stage, on one CUDA device.

``make gpu-proof`` (``python -m benchmarks.gpu``) writes ``results/bench/gpu.json``. On a machine with one
CUDA GPU it

1. saves a classifier of longformer-base's shape (12 layers × 12 heads, hidden 768, window 512, 2 048
   positions; seeded random weights: the real ones cannot be carried to an offline machine) with the
   packaged tokenizer, and synthetic documents long enough to fill 2 048 tokens (``--documents`` test
   documents and as many training documents);
2. runs the pipeline's own stage functions on it, in one process, with ``model.device`` = ``--device``:
   fine-tuning (fp16 mixed precision + gradient checkpointing, batch 1 × accumulation 4, one epoch),
   prediction, head importance on the training documents, attention extraction, IG at 50 fixed steps
   with fp16 autocast and the internal batch chosen from the free GPU memory, the explanation methods
   and the faithfulness curves;
3. records per stage the wall seconds, the seconds per document and the peak GPU memory, and IG's
   seconds per document against the paper's 43.5 s on a T4 (docs/recipes.md §9) and against the
   compute bound ``2 · parameters · tokens · 3 · steps`` FLOP at the card's peak dense fp16 rate.

``--architecture mistral`` (or ``llama``) does the same for a decoder classifier instead, read as a causal
model behind the seam (last-token readout, grouped-query heads, Mistral's sliding window): a shape of Qwen2.5-0.5B's
sizes (24 layers, hidden 896, 14 query and 2 key/value heads, feed-forward 4 864; about 0.4 B parameters with the
packaged vocabulary), a sliding window of 1 024 keys, 2 048 tokens; it writes ``gpu_<architecture>.json``.

``--device cpu --tiny`` runs the same code path on a tiny model (2 layers, hidden 64, 160 tokens) in
about a minute: the test suite runs it so the script cannot rot on machines without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LongformerConfig, LongformerForSequenceClassification

from attnlens.attribution.ig import prepare_inputs, steps_probe
from attnlens.classifier.prediction import encode_texts
from attnlens.data.corpus import CLASS_NAMES
from attnlens.data.sources import load_examples
from attnlens.device import batch_size, resolve_device, synchronize
from attnlens.io import atomic_path, git_commit
from attnlens.models import DECODERS, draw_decoder
from attnlens.models.checkpoints import load_classifier, load_tokenizer, packaged_model_dir
from attnlens.pipeline.config import (
    AttentionConfig,
    AttributionConfig,
    DataConfig,
    ExplanationsConfig,
    FaithfulnessConfig,
    ImportanceConfig,
    ModelConfig,
    PredictConfig,
    SyntheticConfig,
    TrainConfig,
)
from attnlens.stages.attention import run_estimate_head_importance, run_extract_attention
from attnlens.stages.attribution import run_attribute
from attnlens.stages.data import run_prepare_dataset
from attnlens.stages.explanations import run_explain
from attnlens.stages.faithfulness import run_evaluate_faithfulness
from attnlens.stages.model import run_predict, run_train_classifier
from benchmarks.records import write_record

#: The paper's IG cost: 50 steps took about 43.5 s per 2 048-token document on a Colab T4 (docs/recipes.md §9).
PAPER_IG_SECONDS = 43.5
PAPER_IG_STEPS = 50
#: Peak dense fp16 tensor-core rate (FLOP/s, without sparsity) by the name CUDA reports, from the vendors' data sheets.
PEAK_FP16 = {
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 80GB HBM3": 989e12,
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "H100": 756e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "V100": 125e12,
    "T4": 65e12,
}

#: Model and corpus shapes by architecture: the paper's (a decoder's: Qwen2.5-0.5B's sizes), and the tiny one the
#: CPU test runs. A Longformer's ``window`` is two-sided; a decoder's is its causal sliding window (Mistral).
SHAPES = {
    "longformer": {
        "paper": {
            "name": "longformer-base",
            "layers": 12,
            "heads": 12,
            "hidden": 768,
            "ffn": 3072,
            "window": 512,
            "max_length": 2048,
            "min_words": 2000,
            "max_words": 2400,
        },
        "tiny": {
            "name": "tiny",
            "layers": 2,
            "heads": 4,
            "hidden": 64,
            "ffn": 128,
            "window": 16,
            "max_length": 160,
            "min_words": 100,
            "max_words": 140,
        },
    },
    "decoder": {
        "paper": {
            "name": "qwen2.5-0.5b-shaped",
            "layers": 24,
            "heads": 14,
            "key_heads": 2,
            "hidden": 896,
            "ffn": 4864,
            "window": 1024,
            "max_length": 2048,
            "min_words": 2000,
            "max_words": 2400,
        },
        "tiny": {
            "name": "tiny",
            "layers": 2,
            "heads": 6,
            "key_heads": 2,
            "hidden": 96,
            "ffn": 192,
            "window": 48,
            "max_length": 160,
            "min_words": 100,
            "max_words": 140,
        },
    },
}


def shape_of(architecture: str, tiny: bool) -> dict:
    """The model and corpus shape the proof runs for ``architecture`` (longformer, llama or mistral)."""
    return SHAPES["longformer" if architecture == "longformer" else "decoder"]["tiny" if tiny else "paper"]


def save_classifier(folder: Path, shape: dict, architecture: str = "longformer", seed: int = 0) -> int:
    """A classifier of ``architecture`` and ``shape`` with seeded random weights, saved with the packaged tokenizer
    in ``folder``; returns its parameter count (fine-tuning changes the weights, not the count)."""
    tokenizer = load_tokenizer(packaged_model_dir())
    tokenizer.model_max_length = shape["max_length"]
    labels = {"id2label": dict(enumerate(CLASS_NAMES)), "label2id": {c: i for i, c in enumerate(CLASS_NAMES)}}
    if architecture != "longformer":
        window = {"sliding_window": shape["window"]} if architecture in ("mistral", "gemma3") else {}
        model = draw_decoder(
            architecture,
            seed,
            vocab_size=tokenizer.vocab_size,
            hidden_size=shape["hidden"],
            num_hidden_layers=shape["layers"],
            num_attention_heads=shape["heads"],
            num_key_value_heads=shape["key_heads"],
            head_dim=shape["hidden"] // shape["heads"],
            intermediate_size=shape["ffn"],
            max_position_embeddings=shape["max_length"],
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            tie_word_embeddings=False,
            attn_implementation="sdpa",
            **window,
            **labels,
        )
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return sum(p.numel() for p in model.parameters())
    config = LongformerConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        intermediate_size=shape["ffn"],
        max_position_embeddings=shape["max_length"] + tokenizer.pad_token_id + 2,
        attention_window=shape["window"],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        type_vocab_size=1,
        **labels,
    )
    torch.manual_seed(seed)
    model = LongformerForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def peak_fp16(device: torch.device) -> tuple[str, float | None]:
    """The card's name and its peak dense fp16 rate (``None`` off CUDA or for a card not in :data:`PEAK_FP16`)."""
    if device.type != "cuda":
        return platform.processor() or platform.machine(), None
    name = torch.cuda.get_device_name(device)
    compact = name.replace(" ", "").lower()
    for key in sorted(PEAK_FP16, key=len, reverse=True):  # "H100 SXM" before "H100", "A100" before "A10"
        if key.replace(" ", "").lower() in compact:
            return name, PEAK_FP16[key]
    return name, None


def ig_batch_from_memory(model_dir: Path, example_ids: list[int], device: torch.device, steps: int) -> dict:
    """IG's internal batch as ``attribution.steps_per_pass: auto`` sizes it (:func:`attnlens.device.batch_size`:
    one pass of 1 and one of 2 steps on the longest document, 80 % of the free memory over what a step adds, at
    most ``steps``; 8 on a CPU)."""
    model, tokenizer = load_classifier(model_dir)
    model.to(device)
    probe = steps_probe(model, prepare_inputs(model, tokenizer, example_ids, device), 0, autocast=True)
    batch, how = batch_size("auto", device, probe, steps, "IG's internal batch")
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"internal_batch_size": batch, **how}


class Stage:
    """Times one stage: wall seconds (device work included) and peak device memory."""

    def __init__(self, device: torch.device, results: dict, name: str, documents: int) -> None:
        self.device, self.results, self.name, self.documents = device, results, name, documents

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        self.cpu0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        seconds = time.perf_counter() - self.t0
        row = {
            "seconds": round(seconds, 2),
            "cpu_seconds": round(time.process_time() - self.cpu0, 2),
            "documents": self.documents,
            "seconds_per_document": round(seconds / self.documents, 3),
        }
        if self.device.type == "cuda":
            row["peak_gpu_memory_mb"] = round(torch.cuda.max_memory_allocated(self.device) / 1e6, 1)
        self.results[self.name] = row
        print(f"gpu-proof: {self.name}: {row}", file=sys.stderr, flush=True)


def proof(
    device_name: str, tiny: bool, documents: int, ig_steps: int, work: Path, architecture: str = "longformer"
) -> dict:
    """Run every classification stage at the chosen shape in ``work``; the record of ``gpu.json``."""
    shape = shape_of(architecture, tiny)
    device = resolve_device(device_name)
    card, peak = peak_fp16(device)
    classifier = work / "classifier"
    params = save_classifier(classifier, shape, architecture)
    window = shape["window"] if architecture == "longformer" else None  # a decoder's is its checkpoint's
    model_cfg = ModelConfig(
        source="classifier",
        name_or_path=str(classifier),
        max_length=shape["max_length"],
        attention_window=window,
        device=device_name,
    )
    data_cfg = DataConfig(
        source="synthetic",
        seed=42,
        test_fraction=0.5,
        synthetic=SyntheticConfig(
            n_documents=2 * documents, min_words=shape["min_words"], max_words=shape["max_words"]
        ),
    )
    d = work / "results"
    train, test, rationales = d / "data/train.parquet", d / "data/test.parquet", d / "data/rationales.parquet"
    run_prepare_dataset(data_cfg, model_cfg, train, test, rationales, d / "data/split_manifest.json")
    n_train, n_test = len(load_examples(train)[0]), len(load_examples(test)[0])
    stages: dict[str, dict] = {}
    finetuned = d / "models/finetuned"
    with Stage(device, stages, "train_classifier", n_train):
        run_train_classifier(
            TrainConfig(
                epochs=1,
                lr=2e-5,
                batch_size=1,
                gradient_accumulation_steps=4,
                fp16=True,
                gradient_checkpointing=True,
                eval_batch_size=4,
            ),
            classifier,
            train,
            test,
            finetuned,
            d / "models/train_metrics.json",
            device_name,
        )
    predictions, selection = d / "predictions/test.parquet", d / "predictions/selection.json"
    with Stage(device, stages, "predict", n_test):
        run_predict(
            PredictConfig(batch_size=4),
            finetuned,
            test,
            predictions,
            d / "predictions/metrics.json",
            selection,
            device_name,
        )
    with Stage(device, stages, "estimate_head_importance", n_train):
        run_estimate_head_importance(
            ImportanceConfig(), finetuned, train, d / "importance/head_importance.safetensors", device_name
        )
    summary = d / "attention/shard0.safetensors"
    with Stage(device, stages, "extract_attention", n_test):
        run_extract_attention(
            AttentionConfig(n_shards=1),
            finetuned,
            test,
            selection,
            0,
            summary,
            d / "attention/bands/shard0.safetensors",
            device_name,
        )
    longest = max(encode_texts(load_tokenizer(finetuned), load_examples(test)[0]["text"]).input_ids, key=len)
    batch = ig_batch_from_memory(finetuned, longest, device, ig_steps)
    attributions = d / "attributions/shard0.parquet"
    with Stage(device, stages, "attribute", n_test):
        ig_cfg = AttributionConfig(
            n_shards=1, adaptive=False, n_steps=ig_steps, autocast=True, steps_per_pass=batch["internal_batch_size"]
        )
        run_attribute(ig_cfg, finetuned, test, predictions, selection, 0, attributions, device_name)
    explanations = d / "explanations/shard0.parquet"
    with Stage(device, stages, "explain", n_test):
        run_explain(
            ExplanationsConfig(n_shards=1, copies_per_pass=4), finetuned, [attributions], 0, explanations, device_name
        )
    with Stage(device, stages, "evaluate_faithfulness", n_test):
        run_evaluate_faithfulness(
            FaithfulnessConfig(copies_per_pass=4),
            finetuned,
            test,
            rationales,
            [attributions],
            [summary],
            d / "faithfulness/curves.parquet",
            d / "faithfulness/plausibility.parquet",
            [explanations],
            device_name,
        )
    tokens = shape["max_length"]
    flop = 2 * params * tokens * 3 * ig_steps
    ig = stages["attribute"]["seconds_per_document"]
    return {
        "schema": "gpu_proof/v1",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "device": str(device),
        "card": card,
        "architecture": architecture,
        "shape": {**shape, "parameters": params},
        "documents": {"train": n_train, "test": n_test},
        "precision": "fp16 mixed precision (training) and autocast (IG) on CUDA; float32 on a CPU",
        "gradient_checkpointing": True,
        "ig": {
            "steps": ig_steps,
            **batch,
            "seconds_per_document": ig,
            "paper_t4_seconds_per_document": PAPER_IG_SECONDS if ig_steps == PAPER_IG_STEPS else None,
            "speedup_vs_paper_t4": round(PAPER_IG_SECONDS / ig, 2) if ig_steps == PAPER_IG_STEPS and ig else None,
            "flop_per_document": flop,
            "peak_fp16_flops": peak,
            "compute_bound_seconds_per_document": round(flop / peak, 3) if peak else None,
            "share_of_peak": round(flop / peak / ig, 3) if peak and ig else None,
        },
        "stages": stages,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench", help="folder of gpu.json (default: results/bench)")
    parser.add_argument(
        "--device", default="cuda", help="cuda (default), cuda:N, cpu or auto: model.device of every stage"
    )
    parser.add_argument(
        "--architecture",
        default="longformer",
        choices=["longformer", *DECODERS],
        help="longformer (default: gpu.json) or a decoder (gpu_<architecture>.json)",
    )
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model at 160 tokens (the CPU test)")
    parser.add_argument("--documents", type=int, default=16, help="test documents, and as many training ones (16)")
    parser.add_argument("--ig-steps", type=int, default=PAPER_IG_STEPS, help="IG steps per document (the paper's 50)")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("gpu-proof: error: --device: no CUDA device is visible here (--device cpu --tiny checks the script)")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        record = proof(args.device, args.tiny, args.documents, args.ig_steps, args.keep, args.architecture)
    else:
        with tempfile.TemporaryDirectory(prefix="attnlens-gpu-") as tmp:
            record = proof(args.device, args.tiny, args.documents, args.ig_steps, Path(tmp), args.architecture)
    name = "gpu.json" if args.architecture == "longformer" else f"gpu_{args.architecture}.json"
    out = Path(args.out) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(
        f"gpu-proof: wrote {out}: IG {record['ig']['seconds_per_document']} s per document at "
        f"{record['ig']['steps']} steps on {record['card']}",
        file=sys.stderr,
    )
    if args.device.startswith("cuda") and not args.tiny and args.architecture == "longformer":
        record_proof(record)


def record_proof(record: dict) -> None:
    """The record ``gpu_proof`` (benchmarks.records): every classification stage ran on the card at the paper's
    shape, and IG's seconds per document beside the paper's T4."""
    ig = record["ig"]
    paper = f" (paper: {ig['paper_t4_seconds_per_document']} s on a T4)" if ig["paper_t4_seconds_per_document"] else ""
    write_record(
        "gpu_proof",
        "Does every classification stage run on one card, at the paper's shape?",
        f"yes; IG {ig['seconds_per_document']} s per {record['shape']['max_length']}-token document at "
        f"{ig['steps']} steps{paper}",
        "[the GPU proof](#the-gpu-proof-make-gpu-proof)",
        "benchmarks.gpu",
        {"ig_seconds_per_document": ig["seconds_per_document"], "steps": ig["steps"], "stages": list(record["stages"])},
        measured_on=f"one {record['card']}, PyTorch {record['torch']}",
    )


if __name__ == "__main__":
    main()
