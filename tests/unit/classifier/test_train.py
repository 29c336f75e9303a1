import json
import sys
from copy import deepcopy

import numpy as np
import pandas as pd
import pytest
import torch

from attnlens.classifier.fine_tuning import _param_groups, mixed_precision, no_decay_names, train_classifier
from attnlens.data.sources import EXAMPLES_SCHEMA
from attnlens.io import load_json, provenance, save_parquet, save_pretrained
from attnlens.models.checkpoints import load_classifier
from attnlens.pipeline.config import TrainConfig
from tests.support.helpers import GUARD, ROOT, run_guarded


def _data(n):
    rng = np.random.default_rng(0)
    words = {0: "compiler type lambda syntax", 1: "neural learning reward gradient"}
    rows = []
    for i in range(n):
        y = i % 2
        filler = " ".join(rng.choice(["the", "of", "study", "we", "results"], 20))
        rows.append({"example_id": f"t{i}", "text": f"{filler} {words[y]} {filler}", "label": y})
    return pd.DataFrame(rows)


def _train(model, tokenizer, **kw):
    cfg = TrainConfig(epochs=2, lr=1e-3, batch_size=2, gradient_accumulation_steps=2, eval_batch_size=4, **kw)
    return train_classifier(model, tokenizer, _data(16), _data(6), cfg)


@pytest.mark.numerics
def test_training_is_seeded_and_reported(tiny_classifier):

    model, tokenizer = tiny_classifier
    start = deepcopy(model.state_dict())
    a, metrics = _train(deepcopy(model), tokenizer)
    b, _ = _train(deepcopy(model), tokenizer)
    for key, value in a.state_dict().items():  # the same seeded operations on the same machine: bit for bit
        assert torch.equal(value, b.state_dict()[key]), key
    assert any(not torch.equal(v, start[k]) for k, v in a.state_dict().items())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert {"train_loss", "eval_loss", "accuracy", "macro_f1", "seconds"} <= set(metrics["epochs"][0])
    assert metrics["optimizer_steps"] == 8 and metrics["mixed_precision"] == "fp32"
    c, _ = _train(deepcopy(model), tokenizer, seed=43)
    assert not torch.equal(c.classifier.out_proj.weight, a.classifier.out_proj.weight)


@pytest.mark.numerics
def test_gradient_checkpointing_gives_the_same_model(tiny_classifier):

    model, tokenizer = tiny_classifier
    a, _ = _train(deepcopy(model), tokenizer, gradient_checkpointing=False)
    b, _ = _train(deepcopy(model), tokenizer, gradient_checkpointing=True)
    # the recomputed forward in the backward pass runs the same float32 operations, but the gradients' sums may
    # run in another order; 8 AdamW steps at lr 1e-3 carry that float32 rounding into weights ≲ 1
    for key, value in a.state_dict().items():
        torch.testing.assert_close(value, b.state_dict()[key], rtol=1e-4, atol=1e-5)


def test_two_processes_share_the_batches_and_write_once(tiny_classifier, tmp_path):
    """The train_classifier script under torchrun (2 CPU processes, gloo): what `accelerate launch` runs per GPU."""

    model, tokenizer = tiny_classifier
    save_pretrained(model, tokenizer, tmp_path / "base", provenance("classifier/v1"))
    for name, n in (("train", 16), ("test", 6)):
        save_parquet(_data(n), tmp_path / f"{name}.parquet", provenance(EXAMPLES_SCHEMA))
    cfg = {"epochs": 1, "lr": 1e-3, "batch_size": 2, "gradient_accumulation_steps": 2, "eval_batch_size": 4}
    args = [
        "--train-config",
        json.dumps({"train": TrainConfig(**cfg).to_dict()}),
        "--base-dir",
        str(tmp_path / "base"),
        "--train-data",
        str(tmp_path / "train.parquet"),
        "--test-data",
        str(tmp_path / "test.parquet"),
        "--model-dir",
        str(tmp_path / "model"),
        "--metrics-file",
        str(tmp_path / "metrics.json"),
        "--log-file",
        str(tmp_path / "train.log"),
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(ROOT / "workflow/scripts/train_classifier.py"),
        *args,
    ]
    out = run_guarded(cmd, timeout=GUARD["plan"])  # ≤ 10 s measured
    assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "train.log").read_text()
    metrics = load_json(tmp_path / "metrics.json", "train_metrics/v1")
    assert metrics["processes"] == 2 and metrics["optimizer_steps"] == 2  # 16 examples / (2 × 2) / 2 accumulated
    assert (tmp_path / "train.log.rank1").exists() and load_classifier(tmp_path / "model")[0] is not None
    assert not list(tmp_path.glob(".*tmp-*"))


def _small(kind: str) -> torch.nn.Module:
    """One-layer-deep classifiers of each family (two layers for ModernBERT, whose first layer has no attn_norm)."""
    import transformers  # noqa: PLC0415 (only these models need the classes)

    common = {
        "vocab_size": 50,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "max_position_embeddings": 64,
        "pad_token_id": 0,
        "num_labels": 2,
    }
    configs = {
        "longformer": lambda: transformers.LongformerConfig(**common, num_hidden_layers=1, attention_window=[8]),
        "big_bird": lambda: transformers.BigBirdConfig(**common, num_hidden_layers=1, block_size=4),
        "modernbert": lambda: transformers.ModernBertConfig(**common, num_hidden_layers=2, local_attention=8),
        "llama": lambda: transformers.LlamaConfig(**common, num_hidden_layers=1, num_key_value_heads=1),
    }
    return transformers.AutoModelForSequenceClassification.from_config(configs[kind]())


#: Each family's normalisation weights (every bias is left out as well): by the layer's kind, whatever its name.
NORM_WEIGHTS = {
    "longformer": {
        "longformer.embeddings.LayerNorm.weight",
        "longformer.encoder.layer.0.attention.output.LayerNorm.weight",
        "longformer.encoder.layer.0.output.LayerNorm.weight",
    },
    "big_bird": {
        "bert.embeddings.LayerNorm.weight",
        "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.encoder.layer.0.output.LayerNorm.weight",
    },
    # ModernBERT's norms were decayed while the rule looked for "LayerNorm" in the name
    "modernbert": {
        "model.embeddings.norm.weight",
        "model.layers.0.mlp_norm.weight",
        "model.layers.1.attn_norm.weight",
        "model.layers.1.mlp_norm.weight",
        "model.final_norm.weight",
        "head.norm.weight",
    },
    # a decoder's RMSNorm is a class of its own (LlamaRMSNorm), known by its name's ending
    "llama": {
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight",
    },
}


@pytest.mark.parametrize("kind", sorted(NORM_WEIGHTS))
def test_weight_decay_leaves_out_every_bias_and_normalisation_weight(kind):
    model = _small(kind)
    names = {name for name, _ in model.named_parameters()}
    biases = {name for name in names if name.endswith(".bias")}
    assert no_decay_names(model) == NORM_WEIGHTS[kind] | biases
    groups = _param_groups(model, 0.01)
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    assert sum(len(g["params"]) for g in groups) == len(names)  # every parameter in one group
    decayed = {id(p) for p in groups[0]["params"]}
    assert all(p.dim() >= 2 for p in model.parameters() if id(p) in decayed)  # matrices and embeddings only


def test_mixed_precision_is_bf16_or_fp16_on_cuda_only():
    """``train.bf16`` (what decoders train in) before ``train.fp16``, on a CUDA device only; a CPU trains in float32
    whatever is asked (the device is named, not used: no card is needed to decide)."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert mixed_precision(cuda, TrainConfig(fp16=True, bf16=True)) == "bf16"
    assert mixed_precision(cuda, TrainConfig(fp16=True, bf16=False)) == "fp16"
    assert mixed_precision(cuda, TrainConfig(fp16=False, bf16=False)) == "no"
    assert mixed_precision(cpu, TrainConfig(fp16=True, bf16=True)) == "no"
