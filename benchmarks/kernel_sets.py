"""The generation default trained and judged under two CPU kernel sets, and over seeds: how far its figures move.

    python -m benchmarks.kernel_sets [--seeds 0 1 2] [--kernels native portable] [--work DIR] [--cores 2]

A decoder trained from scratch is a function of its seed and of the float rounding of every step, and each CPU
kernel set (AVX-512, AVX2, the portable one) rounds its own way (tests/README.md, "CPU kernels"): two machines
train two different models from one config. This measures what that does to the study. Each run is the generation
study on its decoder trained from scratch (``config/config.yaml`` with ``config/generation_scratch.yaml``,
``generation.train.seed`` set) from an empty ``results/`` in ``DIR/<kernels>-s<seed>`` (``DIR``:
``/tmp/attnlens-kernel-sets/<commit>``), up to the answer leaderboard, under the kernel set's environment
(``native``: this machine's own; ``portable``: :data:`attnlens.device.PORTABLE_KERNELS`). The first kernel set runs
every seed, the others the first seed. A folder that holds a finished run is reused.

``results/bench/kernel_sets.json`` records per run its kernels, wall and CPU seconds, the held-out exact match, the
answers' log-probability and the leaderboard's means; per other kernel set, how far it lies from the first at the
first seed (the exact match's difference, the share of explained answers that are the same text, each leaderboard
mean's difference, and whether each ranked column's best methods are the same ones); and across the first kernel
set's seeds, each figure's range: the spread the kernel sets' differences are read against (docs/benchmarks.md,
"The generation default across seeds and CPU kernel sets").

Run it with nothing else on the machine (two torch jobs on 2 cores slow each other down many times over).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.device import PORTABLE_KERNELS
from attnlens.generation.answer_leaderboard import answer_direction
from attnlens.io import git_commit, load_json, load_parquet
from benchmarks.measuring import ROOT, snakemake_in, timed_command, write_result
from benchmarks.records import thousands, write_record

#: The environment of each kernel set: what it adds (``native`` removes the portable set's variables instead).
KERNEL_SETS = {"native": {}, "portable": PORTABLE_KERNELS}
#: What a run is built to: the leaderboard and what it reads (the explorer, the sanity check and the report are not).
TARGETS = ["results/generation/leaderboard.parquet"]


def run(folder: Path, kernels: str, seed: int, cores: int) -> dict:
    """The generation default at ``seed`` under ``kernels`` in ``folder`` (reused when finished): its timing."""
    done = folder / "kernel_run.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(ROOT / "config", folder / "config")
    (folder / "config" / "seed.yaml").write_text(f"generation:\n  train:\n    seed: {seed}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_KERNELS} | KERNEL_SETS[kernels]
    cmd = snakemake_in(
        folder,
        "--cores",
        str(cores),
        "--configfile",
        "config/generation_scratch.yaml",
        "config/seed.yaml",
        "--",
        *TARGETS,
    )
    print(f"kernel_sets: {kernels}, seed {seed}, in {folder}", file=sys.stderr, flush=True)
    with (folder / "run.log").open("w", encoding="utf-8") as log:
        out, wall, cpu = timed_command(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if out.returncode != 0:  # a decoder that did not learn the task is refused by generate_answers: say so
        said = [ln for ln in (folder / "run.log").read_text(encoding="utf-8").splitlines() if "attnlens: error" in ln]
        why = said[-1] if said else f"see {folder / 'run.log'}"
        raise SystemExit(f"kernel_sets: error: {kernels}, seed {seed}: the run failed: {why}")
    timing = {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1)}
    done.write_text(json.dumps(timing), encoding="utf-8")
    return timing


def figures(folder: Path) -> dict:
    """What one run concluded: the decoder's held-out figures, its explained answers, the leaderboard's means."""
    results = folder / "results"
    metrics = load_json(results / "models/generator_metrics.json")
    responses, _ = load_parquet(results / "generation/responses.parquet")
    summary, _ = load_parquet(results / "generation/leaderboard.parquet")
    means = summary.pivot_table(index="method", columns="metric", values="mean", sort=False)
    return {
        "cpu_kernels": metrics["cpu_kernels"],
        "exact_match": metrics["exact_match"],
        "n_held_out": metrics["n"],
        "mean_answer_log_prob": metrics["mean_answer_log_prob"],
        "answers": dict(zip(responses["example_id"], responses["answer"], strict=True)),
        "leaderboard": {m: {k: float(v) for k, v in row.items()} for m, row in means.iterrows()},
    }


def ranked(leaderboard: dict) -> list[str]:
    """The leaderboard's ranked columns (the cost columns are reported, not ranked)."""
    return [c for c in next(iter(leaderboard.values())) if answer_direction(c) is not None]


def best(leaderboard: dict, column: str) -> list[str]:
    """The methods with the best mean of a ranked column (all of them where they tie)."""
    values = {m: row[column] for m, row in leaderboard.items() if np.isfinite(row[column])}
    top = (max if answer_direction(column) else min)(values.values())
    return sorted(m for m, v in values.items() if v == top)


def apart(a: dict, b: dict) -> dict:
    """How far run ``b`` lies from run ``a``: exact match, the same answers, each ranked mean, each column's best."""
    shared = sorted(set(a["answers"]) & set(b["answers"]))
    columns = ranked(a["leaderboard"])
    cells = {m: {c: b["leaderboard"][m][c] - row[c] for c in columns} for m, row in a["leaderboard"].items()}
    bests = {c: [best(a["leaderboard"], c), best(b["leaderboard"], c)] for c in columns}
    return {
        "exact_match_difference": b["exact_match"] - a["exact_match"],
        "same_answers": sum(a["answers"][i] == b["answers"][i] for i in shared) / max(1, len(shared)),
        "explained_in_both": len(shared),
        "leaderboard_difference": cells,
        "largest_difference": {c: max(abs(cells[m][c]) for m in cells) for c in columns},
        "same_best": {c: first == second for c, (first, second) in bests.items()},
        "best": bests,
    }


def spread(runs: list[dict]) -> dict:
    """Each figure's range over runs (max − min): the exact match and every ranked leaderboard mean."""
    columns = ranked(runs[0]["leaderboard"])
    boards = [r["leaderboard"] for r in runs]
    cells = {m: {c: float(np.ptp([b[m][c] for b in boards])) for c in columns} for m in boards[0]}
    return {
        "exact_match": float(np.ptp([r["exact_match"] for r in runs])),
        "leaderboard": cells,
        "largest": {c: max(cells[m][c] for m in cells) for c in columns},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="generation.train.seed of each run")
    parser.add_argument("--kernels", nargs="+", choices=list(KERNEL_SETS), default=list(KERNEL_SETS))
    parser.add_argument("--work", type=Path, help="the runs go here (default: /tmp/attnlens-kernel-sets/<commit>)")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    parser.add_argument("--out", default="results/bench", help="folder of kernel_sets.json")
    parser.add_argument("--record", metavar="JSON", help="run nothing: record a kernel_sets.json written before")
    args = parser.parse_args(argv)
    if args.record:
        record_kernel_sets(json.loads(Path(args.record).read_text(encoding="utf-8")))
        return
    work = args.work or Path("/tmp/attnlens-kernel-sets") / git_commit()[:12]
    first, seed = args.kernels[0], args.seeds[0]
    plan = [(first, s) for s in args.seeds] + [(k, seed) for k in args.kernels[1:]]
    runs = {}
    for kernels, s in plan:
        folder = work / f"{kernels}-s{s}"
        runs[f"{kernels}-s{s}"] = {"kernels": kernels, "seed": s, **run(folder, kernels, s, args.cores)}
        runs[f"{kernels}-s{s}"].update(figures(folder))
    reference = runs[f"{first}-s{seed}"]
    record = {
        "runs": runs,
        "kernel_sets": {k: apart(reference, runs[f"{k}-s{seed}"]) for k in args.kernels[1:]},
        "seeds": spread([runs[f"{first}-s{s}"] for s in args.seeds]) if len(args.seeds) > 1 else None,
    }
    write_result(args.out, "kernel_sets", record)
    print(summary_table(record))
    record_kernel_sets(record)


def record_kernel_sets(result: dict) -> None:
    """The record ``generation_kernel_sets`` (benchmarks.records) of a result over seeds and kernel sets, with its
    tables (the runs; the leaderboard across seeds and kernel sets), its commit and date the result's own where it
    has them; a result of one seed or one kernel set answers nothing and writes nothing."""
    if result["seeds"] and result["kernel_sets"]:
        tables = {"runs": runs_table(result), "leaderboard": leaderboard_table(result)}
        provenance = result.get("provenance")
        write_record("generation_kernel_sets", *kernel_sets_answer(result), tables=tables, provenance=provenance)


def kernel_sets_answer(record: dict) -> tuple:
    """The question, the answer and its figures of ``generation_kernel_sets`` (benchmarks.records), from a run over
    seeds and kernel sets."""
    exact = [r["exact_match"] for r in record["runs"].values()]
    seeds, columns = record["seeds"]["largest"], list(record["seeds"]["largest"])
    worst = {c: max(d["largest_difference"][c] for d in record["kernel_sets"].values()) for c in columns}
    within = all(worst[c] <= seeds[c] for c in columns)
    same = min(d["same_answers"] for d in record["kernel_sets"].values())
    answer = (
        f"{'yes' if within else 'no'}, {'within' if within else 'beyond'} its seeds' spread: exact match "
        f"{min(exact):.3f}–{max(exact):.3f} over {len(record['runs'])} runs, {same:.0%} of the answers the same; "
        + ", ".join(f"{c} {worst[c]:.3f} apart against the seeds' {seeds[c]:.3f}" for c in SHOWN if c in worst)
    )
    figures = {"exact_match": [min(exact), max(exact)], "same_answers": same, "kernels": worst, "seeds": seeds}
    return (
        "Does the generation default give one answer on every CPU?",
        answer,
        "[across seeds and CPU kernel sets](#the-generation-default-across-seeds-and-cpu-kernel-sets-issue-79)",
        "benchmarks.kernel_sets",
        figures,
    )


#: The leaderboard columns docs/benchmarks.md prints (the others are in ``kernel_sets.json``).
SHOWN = ("top1_drop", "top3_drop", "lds", "precision_at_1")


def runs_table(result: dict) -> dict:
    """One row a run: its seed and kernels, the held-out exact match, the reference answers' log-probability, and
    the whole run's wall (beside the first run's) and CPU seconds."""
    first = next(iter(result["runs"].values()))
    rows = []
    for r in result["runs"].values():
        ratio = r["wall_seconds"] / first["wall_seconds"]
        wall = f"{r['wall_seconds']:.0f} s" + (f" ({ratio:.1f} ×)" if r["kernels"] != first["kernels"] else "")
        kernels = r["kernels"] + (f" ({r['cpu_kernels']})" if r["kernels"] == "native" else "")
        exact = f"{r['exact_match']:.4f} of {thousands(r['n_held_out'])}"
        log_prob = f"{r['mean_answer_log_prob']:.4f}".replace("-", "−")
        rows.append([f"seed {r['seed']}", kernels, exact, log_prob, wall, f"{thousands(round(r['cpu_seconds']))} s"])
    header = ["run", "CPU kernels", "exact match (held out)", "reference answers' log-probability", "wall"]
    return {"header": [*header, "user + system CPU"], "rows": rows}


def leaderboard_table(result: dict) -> dict:
    """Each method's mean over the first kernel set's seeds with their range, then its mean under each other kernel
    set at the first seed (``mean (min–max) · other``)."""
    runs = list(result["runs"].values())
    first = runs[0]["kernels"]
    seeds = [r["leaderboard"] for r in runs if r["kernels"] == first]
    others = [r["leaderboard"] for r in runs if r["kernels"] != first]
    columns = [c for c in SHOWN if c in ranked(seeds[0])]

    def cell(method: str, column: str) -> str:
        values = [b[method][column] for b in seeds]
        text = f"{np.mean(values):.2f} ({min(values):.2f}–{max(values):.2f})"
        return " · ".join([text, *(f"{b[method][column]:.2f}" for b in others)]).replace("-", "−")

    rows = [[f"`{m}`", *(cell(m, c) for c in columns)] for m in seeds[0]]
    return {"header": ["method", *columns], "rows": rows}


def summary_table(record: dict) -> str:
    """Each run's exact match and ranked means, one row a method, as Markdown (docs/benchmarks.md's tables)."""
    lines = []
    for name, r in record["runs"].items():
        board = pd.DataFrame(r["leaderboard"]).T[ranked(r["leaderboard"])]
        lines += [
            f"\n{name} ({r['cpu_kernels']}): exact match {r['exact_match']:.4f} of {r['n_held_out']}, "
            f"{r['wall_seconds']:.0f} s wall, {r['cpu_seconds']:.0f} CPU s",
            board.round(3).to_markdown(),
        ]
    for k, d in record["kernel_sets"].items():
        lines.append(
            f"\n{k}: exact match {d['exact_match_difference']:+.4f}, same answers {d['same_answers']:.3f}, "
            f"largest differences {json.dumps({c: round(v, 3) for c, v in d['largest_difference'].items()})}, "
            f"same best {json.dumps(d['same_best'])}"
        )
    if record["seeds"]:
        s = record["seeds"]
        lines.append(
            f"\nacross seeds: exact match range {s['exact_match']:.4f}, largest ranges "
            f"{json.dumps({c: round(v, 3) for c, v in s['largest'].items()})}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
