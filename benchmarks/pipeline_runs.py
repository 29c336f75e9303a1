"""``pipeline_runs.json``: whole pipelines, each from an empty ``results/``, one after another on this machine, and
the records of the questions they answer (:mod:`benchmarks.records`).

    python -m benchmarks.pipeline_runs [--configs config/config.yaml config/generation.yaml ...] [--out DIR]

Each config is an overlay of ``config/config.yaml`` (the embedded default, run alone when it is the only one), run
with ``make run``'s Snakemake command in a folder of its own: the pipeline's wall time (the first job's start to
the last job's end, from Snakemake's log), the whole command's wall and CPU seconds (its processes' user + system),
its jobs, per-rule wall seconds, and its headline (what the run's model learned). The classification default runs
first whenever another config is asked for, so each other run's cost is a ratio to it measured on the same machine
minutes apart (machines of one kind differ by up to 2 ×: docs/benchmarks.md). Run it with nothing else running.

Records written: ``default_run`` (the classification default), ``task_defaults`` (the task overlays' ratios),
``generation_default`` (``config/generation.yaml``, Gemma 3 270M), ``generation_scratch`` (its control, a decoder
trained from scratch), ``grid`` (``config/grid.yaml``) and ``generation_seeds`` (``config/generation_grid.yaml``:
also each answer method's count of runs it is best in by LDS, from the grid's findings); the first and the third
with their per-rule tables (and the generation's LDS per method) that docs/benchmarks.md prints. ``--record
pipeline_runs.json`` runs nothing and writes the records of a result written before, with its commit and date.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.measuring import ROOT, snakemake_in, timed_command, write_result
from benchmarks.paper_shape import log_jobs
from benchmarks.records import write_record

CLASSIFICATION = "config/config.yaml"
TASKS = {
    "config/multilabel.yaml": "multi-label",
    "config/qa.yaml": "question answering",
    "config/regression.yaml": "regression",
}
#: The generation study's configurations: the default on Gemma 3 270M, and its control trained from scratch.
GENERATION = ("config/generation.yaml", "config/generation_scratch.yaml")
SECTIONS = {
    "default_run": "[the default run](#the-default-run-make-run)",
    "task_defaults": "[the tasks' default runs](#the-tasks-default-runs-docstasksmd)",
    "generation_default": "[the generation default](#the-generation-default-on-gemma-3-270m-configgeneration"
    "yaml-issue-81)",
    "generation_scratch": "[the generation study on a decoder trained from scratch](#the-generation-study-on-a-decoder-"
    "trained-from-scratch-configgeneration_scratchyaml-the-default-until-issue-81-issue-69)",
    "grid": "[the grid](#the-grid-make-grid)",
    "generation_seeds": "[findings.md](findings.md#the-generation-study-across-seeds)",
}


def minutes(seconds: float) -> str:
    """``9 min 39 s``."""
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def run_config(config: str, work: Path) -> dict:
    """``config`` (an overlay of the embedded default) from an empty ``results/`` in ``work``: its times and jobs."""
    shutil.copytree(ROOT / "config", work / "config")
    overlay = [] if config == CLASSIFICATION else ["--configfile", config]
    profile = ("--profile", str(ROOT / "workflow/profiles/workstation"), "--cores", "2", "--resources", "gpu=2")
    cmd = snakemake_in(work, *profile, *overlay)
    out, wall, cpu = timed_command(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"pipeline_runs: {config} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    jobs = [j for j in log_jobs(logs[-1]) if j["rule"] != "all"]
    rules: dict[str, float] = {}
    for job in jobs:
        rules[job["rule"]] = rules.get(job["rule"], 0.0) + job["seconds"]
    pipeline = (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)).total_seconds()
    return {"config": config, "pipeline_s": pipeline, "wall_s": wall, "cpu_s": cpu, "jobs": len(jobs), "rules": rules}


def _headline(results: Path) -> dict:
    """What the run's model learned: the classifier's test metrics, the generator's held-out exact match."""
    for name in ("predictions/metrics.json", "models/generator_metrics.json"):
        if (results / name).exists():
            found = json.loads((results / name).read_text(encoding="utf-8"))
            return {k: v for k, v in found.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {}


def answer_lds(results: Path) -> dict[str, float]:
    """The generation run's mean LDS per answer method (its answer leaderboard)."""
    board = pd.read_parquet(results / "generation" / "leaderboard.parquet")
    lds = board[board["metric"] == "lds"]
    return {str(m): round(float(v), 3) for m, v in zip(lds["method"], lds["mean"], strict=True)}


def best_by_lds(results: Path) -> dict[str, int]:
    """Of a generation grid's runs, how many each answer method is best in by LDS (ties counted for each)."""
    ranks = pd.read_csv(results / "findings" / "rankings.csv")
    lds = ranks[
        (ranks["metric"] == "lds") & (ranks["rank"] == ranks.groupby(["run", "metric"])["rank"].transform("min"))
    ]
    return lds["method"].value_counts().to_dict()


def _rules_table(run: dict) -> dict:
    """A run's rules by their jobs' wall seconds (Snakemake's benchmark files), the longest first."""
    rows = sorted(run["rules"].items(), key=lambda kv: (-kv[1], kv[0]))
    return {"header": ["rule", "wall s"], "rows": [[f"`{rule}`", f"{s:.0f}"] for rule, s in rows]}


def _headline_text(headline: dict) -> str:
    """What a run's model learned, in words: each metric to two places (counts as they are)."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v:.2f}"
                     for k, v in headline.items())  # fmt: skip


def _runs_table(runs: dict[str, dict], base: dict) -> dict:
    """The classification default and each task's: pipeline wall, CPU, jobs, the ratio to the classification's wall,
    and what its model learned."""
    names = {CLASSIFICATION: "classification", **TASKS}
    rows = [
        [f"{names[c]} (`{c}`)", minutes(r["pipeline_s"]), f"{r['cpu_s']:.0f} s", r["jobs"],
         f"{r['pipeline_s'] / base['pipeline_s']:.2f}", _headline_text(r.get("headline", {}))]
        for c, r in runs.items() if c in names
    ]  # fmt: skip
    header = ["run", "pipeline", "user + system CPU", "jobs", "ratio to classification", "headline"]
    return {"header": header, "rows": rows}


def _records(runs: dict[str, dict], provenance: dict | None = None) -> None:
    """The records of the questions these runs answer (module docstring); ``provenance``: the result's, for runs
    measured before (``--record``)."""
    base = runs.get(CLASSIFICATION)
    bench = "benchmarks.pipeline_runs"
    if base:
        write_record(
            "default_run",
            "How long does `make run` take on a laptop?",
            f"{minutes(base['pipeline_s'])} of pipeline, {base['cpu_s']:.0f} CPU seconds, {base['jobs']} jobs",
            SECTIONS["default_run"],
            bench,
            {"pipeline": minutes(base["pipeline_s"]), "pipeline_s": round(base["pipeline_s"]), "jobs": base["jobs"]},
            tables={"rules": _rules_table(base)},
            provenance=provenance,
        )
    tasks = {TASKS[c]: runs[c]["pipeline_s"] / base["pipeline_s"] for c in TASKS if c in runs and base}
    if tasks:
        write_record(
            "task_defaults",
            "What does each task's default cost beside the classification?",
            ", ".join(f"{name} {ratio:.2f} ×" for name, ratio in tasks.items()),
            SECTIONS["task_defaults"],
            bench,
            {name: round(ratio, 2) for name, ratio in tasks.items()},
            tables={"runs": _runs_table(runs, base)},
            provenance=provenance,
        )
    gen = runs.get("config/generation.yaml")
    if gen and base:
        write_record(
            "generation_default",
            "What does the generation study cost on Gemma 3 270M, and which method finds what its answer rests on?",
            section=SECTIONS["generation_default"],
            bench=bench,
            provenance=provenance,
            **_generation_record(gen, base),
        )
    scratch = runs.get("config/generation_scratch.yaml")
    if scratch and base:
        write_record(
            "generation_scratch",
            "What does the generation study cost on a decoder trained from scratch, and which method finds what an "
            "answer rests on?",
            section=SECTIONS["generation_scratch"],
            bench=bench,
            provenance=provenance,
            **_generation_record(scratch, base),
        )
    grid = runs.get("config/grid.yaml")
    if grid:
        write_record(
            "grid",
            "What does a grid of runs cost?",
            f"{minutes(grid['pipeline_s'])} for config/grid.yaml's runs, {grid['jobs']} jobs",
            SECTIONS["grid"],
            bench,
            {"pipeline": minutes(grid["pipeline_s"]), "jobs": grid["jobs"]},
            tables={"rules": _rules_table(grid)},
            provenance=provenance,
        )
    seeds = runs.get("config/generation_grid.yaml")
    if seeds:
        best = seeds["best_by_lds"]
        n = max(best.values()) if best else 0
        write_record(
            "generation_seeds",
            "Which answer method holds up across training seeds?",
            "best by LDS: "
            + ", ".join(f"{m} in {k}" for m, k in sorted(best.items(), key=lambda kv: -kv[1]))
            + f" runs; the generation grid takes {minutes(seeds['pipeline_s'])} of pipeline",
            SECTIONS["generation_seeds"],
            bench,
            {"best_by_lds": best, "most": n, "pipeline": minutes(seeds["pipeline_s"])},
            tables={
                "best_by_lds": {
                    "header": ["method", "runs best by LDS"],
                    "rows": [[f"`{m}`", k] for m, k in _by_value(best)],
                },
                "rules": _rules_table(seeds),
            },
            provenance=provenance,
        )


def _generation_record(gen: dict, base: dict) -> dict:
    """A generation run's answer, figures and tables, its cost a ratio to the classification default's ``base``."""
    ratio, exact = gen["pipeline_s"] / base["pipeline_s"], gen["headline"].get("exact_match", float("nan"))
    lds = gen.get("lds", {})
    ranked = ", ".join(f"{m} {v:.2f}" for m, v in sorted(lds.items(), key=lambda kv: -kv[1])[:3])
    return {
        "answer": f"{ratio:.2f} × the classification default ({minutes(gen['pipeline_s'])} of pipeline); the model's "
        f"held-out exact match {exact:.3f}" + (f"; the highest LDS: {ranked}" if lds else ""),
        "figures": {
            "pipeline": minutes(gen["pipeline_s"]),
            "ratio": round(ratio, 2),
            "exact_match": round(exact, 4),
            "lds": lds,
        },
        "tables": {
            "rules": _rules_table(gen),
            "lds": {"header": ["method", "LDS"], "rows": [[f"`{m}`", f"{v:.3f}"] for m, v in _by_value(lds)]},
        },
    }


def _by_value(values: dict) -> list:
    return sorted(values.items(), key=lambda kv: -kv[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=[CLASSIFICATION, "config/generation.yaml"])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--record", metavar="JSON", help="run nothing: record a pipeline_runs.json")
    args = parser.parse_args(argv)
    if args.record:
        result = json.loads(Path(args.record).read_text(encoding="utf-8"))
        _records(result["runs"], result["provenance"])
        return
    configs = list(dict.fromkeys([CLASSIFICATION, *args.configs]))  # the classification first: each ratio's base
    runs: dict[str, dict] = {}
    for config in configs:
        with tempfile.TemporaryDirectory(prefix="attnlens-runs-") as tmp:
            work = Path(tmp)
            run = run_config(config, work)
            run["headline"] = _headline(work / "results")
            if config in GENERATION:
                run["lds"] = answer_lds(work / "results")
            if config == "config/generation_grid.yaml":
                run["best_by_lds"] = best_by_lds(work / "results")
            runs[config] = run
            print(f"{config}: {minutes(run['pipeline_s'])} of pipeline, {run['cpu_s']:.0f} CPU s", flush=True)
    write_result(args.out, "pipeline_runs", {"runs": runs})
    _records(runs)


if __name__ == "__main__":
    main()
