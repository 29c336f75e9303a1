"""``make gpu-run``: the classification study at the paper's document length, through Snakemake, on one card
(``config/gpu.yaml``), timed → ``results/bench/gpu_run.json``.

    python -m benchmarks.gpu_run [--out results/bench] [--work DIR] [--cores N] [--tiny]

Runs ``snakemake --profile workflow/profiles/workstation --configfile config/gpu.yaml`` in a fresh working
directory (the repository's Snakefile and configs, its own ``results/``): the rules that run the classifier share
the card (``--resources gpu=1``: they never overlap), the CPU-side rules run beside them on the host's other cores.
It writes the wall time from Snakemake's start to its end (start-up, every job, the report excluded), the CPU
seconds of every process it ran, and per rule its jobs, wall seconds (the Snakemake log's job stamps, one-second
resolution) and seconds per document; the card's busy seconds (the GPU jobs' wall time); and the paper's whole
study extrapolated from them: training scaled to 4 280 documents × 2 epochs, every per-document rule to 1 070
test documents, every other rule as it ran (docs/benchmarks.md, "The pipeline on a card").

``--tiny`` runs the same overlay with the `.test` model and corpus on whatever device there is: a check that every
rule of the card's configuration runs and that this bookkeeping reads its files, not a measurement.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import torch
import yaml

from benchmarks.measuring import snakemake_in, timed_command
from benchmarks.records import write_record

ROOT = Path(__file__).resolve().parent.parent
#: The paper's study (recipes §2): fine-tuning on 4 280 documents for two epochs, every analysis on 1 070.
PAPER = {"train_documents": 4280, "epochs": 2, "test_documents": 1070}
#: Rules whose work grows with the test documents (each document once); training grows with the training
#: documents × epochs; every other rule is counted as it ran.
PER_TEST_DOCUMENT = (
    "predict",
    "extract_attention",
    "attribute",
    "explain",
    "evaluate_faithfulness",
    "compare",
    "query_attention",
    "topology",
)
#: The `.test` sizes `--tiny` puts over config/gpu.yaml (a check of the rules and the bookkeeping on a CPU).
TINY = {
    "data": {"synthetic": {"n_documents": 24, "min_words": 40, "max_words": 80}, "test_fraction": 0.25},
    "model": {"max_length": 128, "attention_window": 32},
    "train": {"epochs": 1, "batch_size": 2},
    "importance": {"max_examples": 4},
    "attribution": {"min_steps": 2, "max_steps": 4, "embeddings_steps": 4, "n_shards": 2},
    "attention": {"n_shards": 2},
    "explanations": {"n_shards": 2},
    "topology": {"n_shards": 2},
    "similarity": {"n_permutations": 20, "n_boot": 200},
    "pairs": {"data": {"synthetic": {"n_pairs": 12}}, "exact": {"steps": 3}},
}


def jobs_of(log: Path) -> list[dict]:
    """``[{rule, seconds, start, end, gpu}]`` from a Snakemake log: each job's start and finish stamps and whether
    it asked for the card (``gpu=1`` among its resources)."""
    stamp, current, started, jobs = None, None, {}, []
    for line in log.read_text().splitlines():
        if m := re.match(r"\[(\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]", line):
            stamp = datetime.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := re.match(r"(?:local)?rule (\w+):", line):
            current = {"rule": m.group(1), "start": stamp, "gpu": False}
        elif current is not None and (m := re.match(r"\s+jobid: (\d+)", line)):
            started[m.group(1)] = current
        elif current is not None and re.match(r"\s+resources: .*\bgpu=[1-9]", line):
            current["gpu"] = True
        elif m := re.match(r"Finished jobid: (\d+)", line):
            job = started.pop(m.group(1))
            jobs.append({**job, "end": stamp, "seconds": (stamp - job["start"]).total_seconds()})
    return [job for job in jobs if job["rule"] != "all"]


def summarise(work: Path, wall_s: float | None = None, cpu_s: float | None = None) -> dict:
    """The run's figures (see the module docstring) from its working directory: the newest Snakemake log with
    jobs, the prepared data's document counts and the configuration the run resolved."""
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    jobs = next((found for log in reversed(logs) if (found := jobs_of(log))), None)
    if not jobs:
        raise SystemExit(f"gpu-run: error: {work}: no Snakemake log with finished jobs under .snakemake/log")
    n_test = pq.read_metadata(work / "results/data/test.parquet").num_rows
    n_train = pq.read_metadata(work / "results/data/train.parquet").num_rows
    epochs = int(_resolved(work).get("train", {}).get("epochs", 2))
    rules: dict[str, dict] = {}
    for job in jobs:
        entry = rules.setdefault(job["rule"], {"jobs": 0, "wall_s": 0.0, "gpu": job["gpu"]})
        entry["jobs"] += 1
        entry["wall_s"] += job["seconds"]
    paper_s = {}
    for rule, entry in rules.items():
        if rule == "train_classifier":
            entry["per_document_epoch_s"] = round(entry["wall_s"] / max(n_train * epochs, 1), 4)
            paper_s[rule] = entry["per_document_epoch_s"] * PAPER["train_documents"] * PAPER["epochs"]
        elif rule in PER_TEST_DOCUMENT:
            entry["per_document_s"] = round(entry["wall_s"] / max(n_test, 1), 4)
            paper_s[rule] = entry["per_document_s"] * PAPER["test_documents"]
        else:
            paper_s[rule] = entry["wall_s"]
    gpu_jobs = [job for job in jobs if job["gpu"]]
    analysis = [r for r in PER_TEST_DOCUMENT if r in rules and rules[r]["gpu"]]
    first, last = min(job["start"] for job in jobs), max(job["end"] for job in jobs)
    return {
        "test_documents": n_test,
        "train_documents": n_train,
        "epochs": epochs,
        "wall_s": None if wall_s is None else round(wall_s, 1),
        "jobs_span_s": (last - first).total_seconds(),
        "cpu_s": None if cpu_s is None else round(cpu_s, 1),
        "gpu_busy_s": sum(job["seconds"] for job in gpu_jobs),
        "gpu_jobs": len(gpu_jobs),
        "analysis_rules_on_the_card": analysis,
        "analysis_per_document_s": round(sum(rules[r]["wall_s"] for r in analysis) / max(n_test, 1), 4),
        "rules": dict(sorted(rules.items(), key=lambda kv: -kv[1]["wall_s"])),
        "paper_study": {
            **PAPER,
            "gpu_hours": round(sum(s for r, s in paper_s.items() if rules[r]["gpu"]) / 3600, 3),
            "cpu_side_hours": round(sum(s for r, s in paper_s.items() if not rules[r]["gpu"]) / 3600, 3),
            "how": "training scaled by documents × epochs, the per-document rules by test documents, the rest as "
            "they ran; the card's rules never overlap, so their sum is the card's time",
        },
    }


def _resolved(work: Path) -> dict:
    """The configuration the run read: config/config.yaml under config/gpu.yaml (and the tiny sizes)."""
    cfg: dict = {}
    for name in ("config.yaml", "gpu.yaml", "tiny.yaml"):
        path = work / "config" / name
        if path.exists():
            cfg = _merged(cfg, yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return cfg


def _merged(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run(work: Path, cores: int, tiny: bool) -> dict:
    """config/gpu.yaml through Snakemake in ``work`` (see the module docstring); the summary."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "gpu.yaml"):
        shutil.copy(ROOT / "config" / name, work / "config" / name)
    files = [work / "config" / "gpu.yaml"]
    if tiny:
        (work / "config" / "tiny.yaml").write_text(yaml.safe_dump(TINY), encoding="utf-8")
        files.append(work / "config" / "tiny.yaml")
    cmd = snakemake_in(
        work,
        "--profile",
        str(ROOT / "workflow" / "profiles" / "workstation"),
        "--cores",
        str(cores),
        "--resources",
        "gpu=1",
        "--configfile",
        *map(str, files),
    )
    _, wall, cpu = timed_command(cmd, check=True, cwd=work)
    return summarise(work, wall, cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--work", type=Path, default=None, help="working directory (default: a fresh temporary one)")
    parser.add_argument("--cores", type=int, default=None, help="cores for Snakemake (default: every core)")
    parser.add_argument("--tiny", action="store_true", help="the `.test` sizes: a check, not a measurement")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="attnlens-gpu-run-"))
    cores = args.cores or len(os.sched_getaffinity(0))
    summary = {"tiny": args.tiny, "cores": cores, "work": str(work), **run(work, cores, args.tiny)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("gpu_run_tiny.json" if args.tiny else "gpu_run.json")
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {k: summary[k] for k in ("wall_s", "gpu_busy_s", "analysis_per_document_s", "paper_study")}, indent=2
        )
    )
    if not args.tiny:
        record_run(summary)


def record_run(summary: dict) -> None:
    """The record ``gpu_run`` (benchmarks.records): the whole pipeline's wall time on the card, its busy time, and
    the paper's study extrapolated in card hours."""
    paper = summary["paper_study"]
    write_record(
        "gpu_run",
        "How long does the whole pipeline take on a card?",
        f"{summary['wall_s']:.0f} s of wall for {summary['test_documents']} test documents, the card busy "
        f"{summary['gpu_busy_s']:.0f} s; the paper's study about {paper['gpu_hours']:.1f} card hours",
        "[the pipeline on a card](#the-pipeline-on-a-card-make-gpu-run)",
        "benchmarks.gpu_run",
        {k: summary[k] for k in ("wall_s", "gpu_busy_s", "analysis_per_document_s", "test_documents")}
        | {"paper_gpu_hours": paper["gpu_hours"]},
        measured_on=f"one {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}",
    )


if __name__ == "__main__":
    main()
