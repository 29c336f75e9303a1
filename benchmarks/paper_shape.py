"""Paper-shape rehearsal: the classification study at the paper's model shape, on a handful of documents.

``make paper-shape`` (also part of ``make bench``) writes ``results/bench/paper_shape.json``:

1. a base-size Longformer classifier (12 layers × 12 heads, hidden 768, window 512, 2 048 positions) with
   seeded random weights is saved with the packaged tokenizer, the way a user saves their own;
2. the pipeline runs every rule of the classification study on it (``model.source: classifier``), on
   synthetic documents long enough to fill 2 048 tokens, in a scratch directory, with IG's step counts
   reduced (``--ig-steps``) and every other setting the paper configuration's;
3. one training micro-step of the same model at 2 048 tokens (batch 1, gradient checkpointing, AdamW) is
   timed outside the DAG, since an existing classifier is not fine-tuned.

For every rule it records the job's wall seconds (Snakemake's log), CPU seconds and peak resident memory
(its benchmark file; every job in a process of its own, as on a cluster: a warm job server's forks would leave
the benchmark file measuring only the process that hands the job over), the work unit its cost grows with and
how many units the rehearsal had. The extrapolation to the paper's run (``config/paper.yaml``: 1 070 test
documents, 4 280 training documents, IG at 50 steps and 500 for the showcased documents, per-embedding IG at 200
steps) is linear:

    seconds_paper = (seconds − fixed) / units_rehearsal × units_paper + fixed

with ``fixed`` a job's start-up (interpreter, imports, model load: the median seconds of the rehearsal's
jobs that do not grow with the data) and, for the IG rules, units counted in gradient steps (documents ×
steps). Rules whose work does not grow with the documents (figures, tables of a handful of rows) keep
their seconds. Each sharded rule is checked against the SLURM profile (``workflow/profiles/slurm``): its
peak memory against ``mem_mb`` and its per-shard extrapolated time against ``runtime`` at the paper's
shard count; where the CPU time exceeds it, the shards a CPU-only cluster would need are given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import yaml
from transformers import LongformerConfig, LongformerForSequenceClassification

from attnlens.attribution.artifacts import load_attributions
from attnlens.classifier.selection import load_selection
from attnlens.data.corpus import CLASS_NAMES
from attnlens.data.sources import load_examples
from attnlens.io import atomic_path, provenance
from attnlens.models.checkpoints import load_tokenizer, packaged_model_dir
from attnlens.pipeline.jobserver import SWITCH_ENV
from benchmarks.measuring import snakemake_in
from benchmarks.records import measured_paths_changed, write_record

ROOT = Path(__file__).resolve().parent.parent
PAPER_CONFIG = ROOT / "config" / "paper.yaml"
SLURM_PROFILE = ROOT / "workflow" / "profiles" / "slurm" / "config.yaml"

#: The paper's run (docs/recipes.md §1.1, §2.1, §9): documents and step counts.
PAPER = {
    "test_documents": 1070,
    "train_documents": 4280,
    "ig_steps": 50,
    "showcase_steps": 500,
    "embedding_steps": 200,
    "epochs": 2,
    "max_length": 2048,
}


def base_classifier(folder: Path, seed: int = 0) -> Path:
    """longformer-base's shape with seeded random weights and two labels, saved with the packaged tokenizer."""
    tokenizer = load_tokenizer(packaged_model_dir())
    tokenizer.model_max_length = PAPER["max_length"]
    config = LongformerConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=PAPER["max_length"] + tokenizer.pad_token_id + 2,
        attention_window=512,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        type_vocab_size=1,
        id2label=dict(enumerate(CLASS_NAMES)),
        label2id={c: i for i, c in enumerate(CLASS_NAMES)},
    )
    torch.manual_seed(seed)
    model = LongformerForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def rehearsal_config(classifier: Path, n_test: int, ig_steps: int, cores: int) -> dict:
    """The paper configuration's classification settings on ``n_test`` synthetic test documents of ≥ 2 048 tokens."""
    paper = yaml.safe_load(PAPER_CONFIG.read_text())
    n_train = 2 * n_test
    return {
        "studies": ["classification"],
        "data": {
            "source": "synthetic",
            "seed": 42,
            "test_fraction": n_test / (n_test + n_train),
            "synthetic": {"n_documents": n_test + n_train, "min_words": 2000, "max_words": 2400},
        },
        "model": {
            "source": "classifier",
            "name_or_path": str(classifier),
            "max_length": PAPER["max_length"],
            "attention_window": 512,
            "seed": 42,
        },
        "predict": {"batch_size": paper["predict"]["batch_size"], "seed": 42, "extra_ids": []},
        "importance": {**paper["importance"], "max_examples": n_train},
        "attention": {**paper["attention"], "n_shards": cores},
        "attribution": {
            **paper["attribution"],
            "n_shards": cores,
            "n_steps": ig_steps,
            "showcase_steps": ig_steps,
            "embeddings_steps": ig_steps,
            "steps_per_pass": 2,
        },
        "explanations": {**paper["explanations"], "n_shards": cores, "copies_per_pass": 4},
        "faithfulness": {**paper["faithfulness"], "copies_per_pass": 4},
        "similarity": {k: v for k, v in paper["similarity"].items() if k not in ("extra_datasets", "dataset_name")},
    }


def log_jobs(log: Path) -> list[dict]:
    """``[{rule, seconds, start, end}]`` from a Snakemake log (job start and finish stamps, one-second resolution)."""
    stamp, rule, jobs, started = None, None, [], {}
    for line in log.read_text().splitlines():
        if m := re.match(r"\[(\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]", line):
            stamp = datetime.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := re.match(r"(?:local)?rule (\w+):", line):
            rule = m.group(1)
        elif m := re.match(r"\s+jobid: (\d+)", line):
            started[m.group(1)] = (rule, stamp)
        elif m := re.match(r"Finished jobid: (\d+)", line):
            name, t0 = started[m.group(1)]
            jobs.append({"rule": name, "seconds": (stamp - t0).total_seconds(), "start": t0, "end": stamp})
    return jobs


def rule_benchmarks(results: Path) -> dict[str, dict]:
    """Per rule: summed CPU seconds and peak RSS (MB) of its jobs' benchmark files (in a grid every run's,
    ``results/runs/<run>/benchmarks/``, and the shared jobs', under ``results/datasets/`` and
    ``results/base_models/``)."""
    out: dict[str, dict] = {}
    for tsv in sorted(p for p in results.rglob("*.tsv") if "benchmarks" in p.relative_to(results).parts[:-2]):
        header, values = tsv.read_text().splitlines()[:2]
        row = dict(zip(header.split("\t"), values.split("\t"), strict=False))
        entry = out.setdefault(tsv.parent.name, {"cpu_s": 0.0, "max_rss_mb": 0.0, "jobs": 0})
        entry["cpu_s"] += float(row["cpu_time"])
        entry["max_rss_mb"] = max(entry["max_rss_mb"], float(row["max_rss"]))
        entry["jobs"] += 1
    return out


def units(rule: str, counts: dict, ig_steps: int) -> tuple[str, float, float] | None:
    """``(unit, units in the rehearsal, units in the paper's run)`` a rule's cost grows with; None: fixed."""
    test, train, shown = counts["test"], counts["train"], counts["showcased"]
    paper_test, paper_shown = PAPER["test_documents"], counts["paper_showcased"]
    if rule == "attribute":
        paper = (paper_test - paper_shown) * PAPER["ig_steps"] + paper_shown * PAPER["showcase_steps"]
        return "IG gradient steps", test * ig_steps, paper
    if rule == "attribute_embeddings":
        return "per-embedding IG steps", shown * ig_steps, paper_shown * PAPER["embedding_steps"]
    if rule == "estimate_head_importance":
        return "training documents", train, PAPER["train_documents"]
    if rule in ("predict", "extract_attention", "explain", "evaluate_faithfulness", "compare", "aggregate_similarity"):
        return "test documents", test, paper_test
    return None


def extrapolate(jobs: list[dict], bench: dict, counts: dict, ig_steps: int, shards: dict, slurm: dict) -> dict:
    """Per rule: measured seconds, unit, per-unit seconds and the paper-scale estimate, with the SLURM check."""
    by_rule: dict[str, list[float]] = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job["seconds"])
    fixed = sorted(s for r, ss in by_rule.items() if r != "all" and units(r, counts, ig_steps) is None for s in ss)
    startup = fixed[len(fixed) // 2] if fixed else 0.0  # median: interpreter, imports, model load
    rows = {}
    for rule, seconds in by_rule.items():
        if rule == "all":
            continue
        total = sum(seconds)
        row = {"jobs": len(seconds), "seconds": round(total, 1), **bench.get(rule, {})}
        scaled = units(rule, counts, ig_steps)
        if scaled is None:
            row.update(unit="fixed", seconds_paper=round(total, 1))
        else:
            unit, have, paper = scaled
            work = max(total - startup * len(seconds), 0.0)  # 0: below the log's one-second resolution
            per_unit = work / have if have else float("nan")
            n_shards = shards.get(rule, 1)
            paper_s = per_unit * paper + startup * n_shards
            row.update(
                unit=unit,
                units_rehearsal=have,
                units_paper=paper,
                seconds_per_unit=round(per_unit, 2),
                seconds_paper=round(paper_s, 0),
                hours_paper=round(paper_s / 3600, 1),
                paper_shards=n_shards,
                hours_per_shard_paper=round(paper_s / n_shards / 3600, 2),
            )
        if rule in slurm:
            res = slurm[rule]
            check = {"mem_mb": res.get("mem_mb"), "runtime_min": res.get("runtime")}
            if "max_rss_mb" in row and res.get("mem_mb"):
                check["memory_fits"] = row["max_rss_mb"] <= res["mem_mb"]
            if "hours_per_shard_paper" in row and res.get("runtime"):
                per_shard_min = row["hours_per_shard_paper"] * 60
                check["cpu_runtime_fits"] = per_shard_min <= res["runtime"]
                if rule in shards:  # a sharded rule: how many shards a CPU-only cluster would need
                    check["cpu_shards_needed"] = math.ceil(row["seconds_paper"] / 60 / res["runtime"])
            row["slurm"] = check
        rows[rule] = row
    return rows


def time_training_step(folder: Path, threads: int, steps: int = 2) -> dict:
    """Seconds of one fwd + bwd + AdamW step at batch 1 × 2 048 tokens, gradient checkpointing, fp32 (CPU)."""
    torch.set_num_threads(threads)
    model = LongformerForSequenceClassification.from_pretrained(folder)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=2e-5)
    ids = torch.randint(1000, 20000, (1, PAPER["max_length"]))
    glob = torch.zeros_like(ids)
    glob[:, 0] = 1
    times = []
    for _ in range(steps + 1):  # the first step allocates AdamW's states: not counted
        t0 = time.perf_counter()
        loss = model(input_ids=ids, global_attention_mask=glob, labels=torch.tensor([1])).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        times.append(time.perf_counter() - t0)
    per_step = sum(times[1:]) / steps
    passes = PAPER["epochs"] * PAPER["train_documents"]
    note = "fp32 on CPU; the paper's run is fp16 on a GPU (the GPU section of docs/benchmarks.md)"
    return {
        "seconds_per_document_step": round(per_step, 2),
        "passes_paper": passes,
        "hours_paper": round(per_step * passes / 3600, 1),
        "threads": threads,
        "note": note,
    }


def rehearse(n_test: int = 2, ig_steps: int = 4, cores: int = 2, keep: Path | None = None, reuse: bool = False) -> dict:
    """Run the rehearsal in a scratch directory (or ``keep``; with ``reuse``, summarise the run already there)."""
    work = Path(tempfile.mkdtemp(prefix="attnlens-paper-shape-")) if keep is None else keep
    classifier = work / "longformer-base-random"
    try:
        if not reuse:
            base_classifier(classifier)
            cfg = rehearsal_config(classifier, n_test, ig_steps, cores)
            (work / "config").mkdir(exist_ok=True)
            shutil.copy(ROOT / "config" / "config.yaml", work / "config" / "config.yaml")
            overrides = work / "config" / "paper_shape.yaml"
            overrides.write_text(yaml.safe_dump(cfg, sort_keys=False))
            cmd = snakemake_in(work, "--configfile", str(overrides), "--cores", str(cores))
            fresh = {**os.environ, SWITCH_ENV: "0"}  # each job its own process: its benchmark file measures it
            run = subprocess.run(cmd, capture_output=True, text=True, env=fresh)
            if run.returncode:
                raise RuntimeError(f"the rehearsal's pipeline failed:\n{run.stderr[-3000:]}")
        log = max((work / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
        jobs = log_jobs(log)
        test, _ = load_examples(work / "results/data/test.parquet")
        train, _ = load_examples(work / "results/data/train.parquet")
        attributions = load_attributions(sorted((work / "results/attributions").glob("shard*.parquet")))
        shown = len({s["example_id"] for s in load_selection(work / "results/predictions/selection.json")})
        paper = yaml.safe_load(PAPER_CONFIG.read_text())
        counts = {
            "test": len(test),
            "train": min(2 * n_test, len(train)),
            "showcased": shown,
            "paper_showcased": len(paper["predict"]["extra_ids"]) + 6,
        }
        shards = {
            "attribute": paper["attribution"]["n_shards"],
            "extract_attention": paper["attention"]["n_shards"],
            "explain": paper["explanations"]["n_shards"],
            "compare": paper["attention"]["n_shards"],
        }
        shards = {rule: int(n) for rule, n in shards.items()}
        slurm = yaml.safe_load(SLURM_PROFILE.read_text()).get("set-resources", {})
        rules = extrapolate(jobs, rule_benchmarks(work / "results"), counts, ig_steps, shards, slurm)
        train_step = time_training_step(classifier, cores)
        tokens = sorted({len(ids) for ids in attributions["input_ids"]})
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    total = sum(r["seconds_paper"] for r in rules.values()) + train_step["hours_paper"] * 3600
    wall = sum(job["seconds"] for job in jobs)
    return {
        "model": "Longformer 12 layers x 12 heads, hidden 768, window 512, random weights (model.source classifier)",
        "tokens": tokens,
        "rehearsal": {
            "test_documents": counts["test"],
            "train_documents": counts["train"],
            "showcased": shown,
            "ig_steps": ig_steps,
            "cores": cores,
            "jobs_s": round(wall, 1),
            "device": "cpu",
        },
        "paper": {**PAPER, "showcased": counts["paper_showcased"]},
        "formula": "seconds_paper = (seconds - jobs x startup) / units_rehearsal x units_paper + shards_paper x "
        "startup (the median fixed job); IG rules in gradient steps (documents x steps), head importance in "
        "training documents, the rest in test documents; figures and tables fixed",
        "rules": rules,
        "train_classifier": train_step,
        "cpu_hours_paper": round(total / 3600, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "results" / "bench"))
    parser.add_argument("--documents", type=int, default=2, help="test documents (training: twice as many)")
    parser.add_argument("--ig-steps", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="run in this folder and keep it")
    parser.add_argument("--reuse", action="store_true", help="summarise the run already in --keep")
    parser.add_argument("--record", metavar="JSON", help="run nothing: record a paper_shape.json written before")
    args = parser.parse_args(argv)
    if args.record:
        record_paper_shape(json.loads(Path(args.record).read_text(encoding="utf-8")))
        return
    result = {
        **rehearse(args.documents, args.ig_steps, args.cores, args.keep, args.reuse),
        "provenance": provenance("bench_paper_shape/v1", measured_paths_changed=measured_paths_changed()),
    }
    with atomic_path(Path(args.out) / "paper_shape.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    record_paper_shape(result)


def record_paper_shape(result: dict) -> None:
    """The record ``paper_shape`` (benchmarks.records), with its table of the rules whose cost grows with the data."""
    tables = {"rules": rules_table(result)}
    write_record("paper_shape", *paper_shape_answer(result), tables=tables, provenance=result.get("provenance"))


def rules_table(result: dict) -> dict:
    """One row a rule that grows with the data: the rehearsal's seconds and jobs, peak RSS, its unit, seconds per
    unit, the paper's CPU hours and hours a shard, and the SLURM profile's check of memory and runtime."""

    def fits(ok: bool | None, limit: str) -> str:
        return "–" if ok is None else f"{'fits' if ok else 'exceeds'} {limit}"

    rows = []
    for rule, r in result["rules"].items():
        if r["unit"] == "fixed":
            continue
        rss = f"{r['max_rss_mb'] / 1000:.1f} GB" if "max_rss_mb" in r else "–"
        slurm = r.get("slurm")
        check = "–"
        if slurm:
            memory = fits(slurm.get("memory_fits"), f"{slurm['mem_mb'] / 1000:.0f} GB" if slurm.get("mem_mb") else "")
            runtime = fits(slurm.get("cpu_runtime_fits"), f"{slurm.get('runtime_min')} min")
            check = f"{memory} / {runtime}"
        rows.append(
            [f"`{rule}`", f"{r['seconds']:.0f} ({r['jobs']})", rss, r["unit"], f"{r['seconds_per_unit']:.1f}",
             f"{r['hours_paper']:.1f}", f"{r['paper_shards']} → {r['hours_per_shard_paper']:.2f}", check]
        )  # fmt: skip
    header = ["rule", "rehearsal s (jobs)", "peak RSS", "grows with", "s per unit", "paper, CPU hours"]
    return {"header": [*header, "paper shards → h each", "SLURM profile: memory / runtime (CPU)"], "rows": rows}


def paper_shape_answer(result: dict) -> tuple:
    """The question, answer, section, bench and figures of ``paper_shape`` (benchmarks.records): the paper's whole
    study extrapolated from the rehearsal, in CPU hours, and IG's share."""
    ig = sum(
        r.get("hours_paper", 0.0)
        for name, r in result["rules"].items()
        if name in ("attribute", "attribute_embeddings")
    )
    cores = result["rehearsal"]["cores"]
    answer = f"about {result['cpu_hours_paper']:.0f} CPU hours on {cores} cores (IG {ig:.0f})"
    figures = {"cpu_hours": result["cpu_hours_paper"], "ig_hours": round(ig, 1), "cores": cores}
    section = "[the paper-shape rehearsal](#the-paper-shape-rehearsal-make-paper-shape-part-of-make-bench)"
    return "What would the paper's whole study cost?", answer, section, "benchmarks.paper_shape", figures


if __name__ == "__main__":
    main()
