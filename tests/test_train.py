import json
import sys
from copy import deepcopy

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import GUARD, ROOT, run_guarded

from attnlens.config import TrainConfig
from attnlens.data import EXAMPLES_SCHEMA
from attnlens.io import load_json, provenance, save_parquet, save_pretrained
from attnlens.models.loading import load_classifier
from attnlens.train import train_classifier


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
    args = ["--train-config", json.dumps({"train": TrainConfig(**cfg).to_dict()}), "--base-dir", str(tmp_path / "base"),
            "--train-data", str(tmp_path / "train.parquet"), "--test-data", str(tmp_path / "test.parquet"),
            "--model-dir", str(tmp_path / "model"), "--metrics-file", str(tmp_path / "metrics.json"),
            "--log-file", str(tmp_path / "train.log")]  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "workflow/scripts/train_classifier.py"), *args]  # fmt: skip
    out = run_guarded(cmd, timeout=GUARD["plan"])  # ≤ 10 s measured
    assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "train.log").read_text()
    metrics = load_json(tmp_path / "metrics.json", "train_metrics/v1")
    assert metrics["processes"] == 2 and metrics["optimizer_steps"] == 2  # 16 examples / (2 × 2) / 2 accumulated
    assert (tmp_path / "train.log.rank1").exists() and load_classifier(tmp_path / "model")[0] is not None
    assert not list(tmp_path.glob(".*tmp-*"))
