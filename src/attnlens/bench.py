"""Benchmarks behind the performance targets (``make bench`` → ``results/bench/*.json``).

``foundation.json``:

* ``model``: forward+backward and forward-only seconds of the converted default model at the
  default ``max_length`` (fp32, on this machine's threads), median of ``repeats``;
* ``pipeline``: wall seconds of the whole default pipeline from an empty ``results/`` in a scratch
  directory (target ≤ 240 s on 2 CPU cores), and of a second call with nothing changed (target ≤ 10 s).

Run: ``python -m attnlens.bench --out results/bench [--skip-pipeline]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from attnlens.config import ModelConfig, load_config
from attnlens.io import atomic_path, provenance
from attnlens.modeling import build_base_model, global_attention_mask

ROOT = Path(__file__).resolve().parents[2]


def bench_model(cfg: ModelConfig, batch_size: int = 1, repeats: int = 5) -> dict:
    """Median seconds of one training step (forward + backward) and one inference forward pass."""
    model, tokenizer = build_base_model(cfg, num_labels=2)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (batch_size, cfg.max_length), generator=generator)
    ids[:, 0] = tokenizer.cls_token_id
    ids[:, -1] = tokenizer.sep_token_id
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": global_attention_mask(mask)}
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


def bench_pipeline(config_path: Path, cores: int = 2) -> dict:
    """Time the full pipeline from scratch in a temporary directory, then a no-op second call."""
    with tempfile.TemporaryDirectory(prefix="attnlens-bench-") as tmp:
        work = Path(tmp)
        (work / "config").mkdir()
        shutil.copy(config_path, work / "config" / "config.yaml")
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work)]
        cmd += ["--cores", str(cores), "all"]
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
            rules[tsv.stem] = {"s": float(row["s"]), "max_rss_mb": float(row["max_rss"])}
    return {
        "cores": cores,
        "full_run_s": round(full, 1),
        "full_run_target_s": 240,
        "full_run_ratio": round(full / 240, 3),
        "noop_run_s": round(noop, 1),
        "noop_run_target_s": 10,
        "noop_ran_nothing": second.returncode == 0 and "Nothing to be done" in second.stdout + second.stderr,
        "rules": rules,
        "train_seconds": train["train_seconds"],
        "test_accuracy": metrics["accuracy"],
        "test_macro_f1": metrics["macro_f1"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--skip-pipeline", action="store_true")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    result = {
        "machine": {"cpus": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__},
        "model": [bench_model(ModelConfig.from_dict(config["model"]), b) for b in (1, 2)],
    }
    if not args.skip_pipeline:
        result["pipeline"] = bench_pipeline(Path(args.config))
    result["provenance"] = provenance("bench_foundation/v1")
    out = Path(args.out) / "foundation.json"
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
