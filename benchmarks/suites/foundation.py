"""``foundation.json``:

* ``model``: forward+backward and forward-only seconds of the converted default model at the
  default ``max_length`` (fp32, on this machine's threads), median of ``repeats``;
* ``pipeline``: wall seconds of the whole default pipeline from an empty ``results/`` in a scratch
  directory on every core of the machine (target ≤ 600 s on 2 CPU cores, every study included), the
  Siamese pair stage's share reported on its own, and a second call with nothing changed (target ≤ 10 s).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from attnlens.models import architecture
from attnlens.models.loading import build_base_model
from attnlens.pipeline.config import ModelConfig, load_config
from benchmarks.measuring import resolved_model, snakemake_in


def bench_model(cfg: ModelConfig, batch_size: int = 1, repeats: int = 5) -> dict:
    """Median seconds of one training step (forward + backward) and one inference forward pass."""
    model, tokenizer = build_base_model(cfg, num_labels=2)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (batch_size, cfg.max_length), generator=generator)
    ids[:, 0] = tokenizer.cls_token_id
    ids[:, -1] = tokenizer.sep_token_id
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, **architecture(model).forward_args(mask)}
    labels = torch.zeros(batch_size, dtype=torch.long)
    model.train()
    train_times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        model(**batch, labels=labels).loss.backward()
        train_times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    model.eval()
    eval_times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            model(**batch)
            eval_times.append(time.perf_counter() - t0)
    return {
        "max_length": cfg.max_length,
        "attention_window": cfg.attention_window,
        "batch_size": batch_size,
        "forward_backward_s": statistics.median(train_times[1:]),  # first call warms up
        "forward_s": statistics.median(eval_times[1:]),
        "threads": torch.get_num_threads(),
    }


#: The whole default run, every study, on 2 CPU cores: 15 minutes.
FULL_RUN_TARGET_S = 600  # about 10 minutes on 2 CPU cores (issue 34); machines of one kind differ up to 1.9x


PAIR_RULES = ("train_pair_encoder", "attribute_pairs", "pair_convergence", "pair_topology")


def bench_pipeline(config_path: Path, cores: int | None = None) -> dict:
    """Time the full pipeline from scratch in a temporary directory (every core by default), then a no-op call."""
    cores = cores or os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="attnlens-bench-") as tmp:
        work = Path(tmp)
        (work / "config").mkdir()
        shutil.copy(config_path, work / "config" / "config.yaml")
        cmd = snakemake_in(work, "--cores", str(cores), "all")
        t0 = time.perf_counter()
        first = subprocess.run([*cmd, "--quiet"], capture_output=True, text=True)
        full = time.perf_counter() - t0
        if first.returncode:
            raise RuntimeError(f"pipeline failed:\n{first.stderr[-2000:]}")
        t0 = time.perf_counter()
        second = subprocess.run(cmd, capture_output=True, text=True)
        noop = time.perf_counter() - t0
        metrics = json.loads((work / "results/predictions/metrics.json").read_text())
        train = json.loads((work / "results/models/train_metrics.json").read_text())
        rules = {}
        for tsv in (work / "results/benchmarks").rglob("*.tsv"):
            header, values = tsv.read_text().splitlines()[:2]
            row = dict(zip(header.split("\t"), values.split("\t"), strict=False))
            rules[f"{tsv.parent.name}/{tsv.stem}"] = {"s": float(row["s"]), "max_rss_mb": float(row["max_rss"])}
    pair_stage = sum(v["s"] for k, v in rules.items() if k.split("/")[0] in PAIR_RULES)
    return {
        "cores": cores,
        "full_run_s": round(full, 1),
        "full_run_target_s": FULL_RUN_TARGET_S,
        "full_run_ratio": round(full / FULL_RUN_TARGET_S, 3),
        "pair_stage_s": round(pair_stage, 1),
        "pair_stage_target_s": 600,
        "noop_run_s": round(noop, 1),
        "noop_run_target_s": 10,
        "noop_ran_nothing": second.returncode == 0 and "Nothing to be done" in second.stdout + second.stderr,
        "rules": rules,
        "train_seconds": train["train_seconds"],
        "test_accuracy": metrics["accuracy"],
        "test_macro_f1": metrics["macro_f1"],
    }


def run(config_path: str, skip_pipeline: bool) -> dict:
    config = load_config(config_path)
    result = {
        "machine": {"cpus": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__},
        "model": [bench_model(resolved_model(config["model"]), b) for b in (1, 2)],
    }
    if not skip_pipeline:
        result["pipeline"] = bench_pipeline(Path(config_path))
    return result
