"""``slurm_study.json``: the generation study at scale through the SLURM profile — several hundred answers of the
control decoder (``config/generation_scratch.yaml``), its answer rules cut into ``--shards`` jobs on the one-node
cluster of ``tests/slurm/cluster.sh``, against the same answers in one job on this machine.

    python -m benchmarks.slurm_study [--answers 320] [--shards 8] [--out results/bench]  # root; nothing else running

1. **One job**: the control from an empty folder with ``generation.n_examples: answers`` and ``n_shards: 1``, locally
   with ``make run``'s command, to its leaderboard (the decoder trained, the answers generated, ablated, explained
   and judged in one job each).
2. **Sharded, through SLURM**: a copy of that folder, its trained decoder and answers kept, with ``n_shards:
   shards``: the answer rules' jobs and the leaderboard through ``workflow/profiles/slurm`` (placeholders filled for
   the node by ``tests/slurm/local_profile.py``, every job on one CPU), each job submitted with ``sbatch``.
3. **Compared**: every shard read back as the rules read them (:func:`load_answer_shards`) against the one job's
   frame, every column but the wall clocks equal to the bit, and the leaderboard's every metric but the cost ones.

The record ``slurm_study``: answers, shards, jobs submitted, each way's wall and CPU seconds, and what was equal.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from attnlens.attribution.artifacts import (
    ABLATION_COLUMNS,
    ABLATIONS_SCHEMA,
    ANSWER_SCORE_COLUMNS,
    ANSWER_SCORES_SCHEMA,
    JUDGED_COLUMNS,
    JUDGED_SCHEMA,
    load_answer_shards,
)
from attnlens.io import load_parquet
from benchmarks.measuring import ROOT, snakemake_in, timed_command, write_result
from benchmarks.paper_shape import log_jobs
from benchmarks.pipeline_runs import minutes
from benchmarks.records import write_record

CONTROL = "config/generation_scratch.yaml"
ANSWER_RULES = ("ablate_contexts", "explain_answers", "judge_answers")
#: Columns and metrics that are wall clocks, or divided by one: the rest must be equal to the bit.
TIMED = {"seconds", "forward_seconds", "peak_bytes"}
TIMED_METRICS = {"seconds", "cost_ratio", "peak_mib"}
ARTIFACTS = {
    "ablations": (ABLATIONS_SCHEMA, ABLATION_COLUMNS),
    "scores": (ANSWER_SCORES_SCHEMA, ANSWER_SCORE_COLUMNS),
    "judged": (JUDGED_SCHEMA, JUDGED_COLUMNS),
}


def _overlay(work: Path, answers: int, shards: int) -> Path:
    """The control's overlay with ``answers`` explained in ``shards`` shards, written into ``work/config``."""
    overlay = yaml.safe_load((ROOT / CONTROL).read_text(encoding="utf-8"))
    overlay["generation"] = {**overlay.get("generation", {}), "n_examples": answers, "n_shards": shards}
    path = work / "config" / "scale.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(overlay, sort_keys=False), encoding="utf-8")
    return path


def answer_window(work: Path) -> dict:
    """From the latest Snakemake log of ``work``: the answer rules' jobs, and the seconds from the first one's start
    to the last one's end."""
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    jobs = [j for j in log_jobs(logs[-1]) if j["rule"] in ANSWER_RULES]
    span = (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)).total_seconds()
    return {"answer_jobs": len(jobs), "answer_rules_s": span}


def one_job(work: Path, answers: int) -> dict:
    """Step 1: the whole study, one job a rule, on this machine, each job on one thread as each SLURM job is (two
    threads split a sum over the vocabulary otherwise, and its last bits differ)."""
    shutil.copytree(ROOT / "config", work / "config")
    profile = ("--profile", str(ROOT / "workflow/profiles/workstation"), "--cores", "1", "--resources", "gpu=1")
    cmd = snakemake_in(work, *profile, "--configfile", str(_overlay(work, answers, 1)))
    out, wall, cpu = timed_command(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"slurm_study: the one-job run failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": cpu, **answer_window(work)}


def through_slurm(work: Path, answers: int, shards: int, profile: Path) -> dict:
    """Step 2: the answer rules in ``shards`` jobs each and the leaderboard, through the SLURM profile."""
    target = "results/generation/leaderboard.parquet"
    cmd = snakemake_in(work, target, "--profile", str(profile), "--configfile", str(_overlay(work, answers, shards)))
    out, wall, cpu = timed_command(["timeout", "-k", "10", "3000", *cmd], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"slurm_study: the SLURM run failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    submitted = re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+)", out.stdout + out.stderr)
    rules = re.findall(r"^rule (\w+):", out.stdout + out.stderr, re.M)
    sacct = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %T"], capture_output=True, text=True)
    return {"wall_s": wall, "cpu_s": cpu, "submitted": len(submitted), "rules": sorted(set(rules)),
            "squeue": sacct.stdout.strip().splitlines()[-3:], **answer_window(work)}  # fmt: skip


def compared(one: Path, sharded: Path, shards: int) -> dict:
    """Step 3: each answer artifact and the leaderboard, the sharded run's against the one job's."""
    answers = load_parquet(one / "generation/responses.parquet")[0]["example_id"]
    out = {}
    for name, (schema, columns) in ARTIFACTS.items():
        single = load_parquet(one / f"generation/{name}/shard0.parquet", schema, columns)[0]
        paths = [sharded / f"generation/{name}/shard{k}.parquet" for k in range(shards)]
        together = load_answer_shards(paths, schema, columns, answers)
        if name == "judged":
            single = single[~single["metric"].isin(TIMED_METRICS)].reset_index(drop=True)
            together = together[~together["metric"].isin(TIMED_METRICS)].reset_index(drop=True)
        kept = [c for c in columns.names if c not in TIMED]
        out[name] = {"rows": len(single), "shard_rows": [len(load_parquet(p)[0]) for p in paths],
                     "difference": _difference(together[kept], single[kept])}  # fmt: skip
    boards = [pd.read_parquet(r / "generation/leaderboard.parquet") for r in (one, sharded)]
    boards = [b[~b["metric"].isin(TIMED_METRICS)].reset_index(drop=True) for b in boards]
    out["leaderboard"] = {"rows": len(boards[0]), "difference": _difference(boards[1], boards[0])}
    return out


def _difference(got: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    """None where the frames are equal to the bit (NaN where NaN), else what pandas says differs first and the
    largest difference of any number."""
    try:
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
    except AssertionError as err:
        largest = 0.0
        for column in got.columns:
            a, b = (_numbers(f[column]) for f in (got, expected))
            if a is not None and b is not None and a.shape == b.shape:
                largest = max(largest, float(np.nanmax(np.abs(a - b), initial=0.0)))
        return f"{str(err).splitlines()[0][:200]}; largest difference {largest:.3g}"
    return None


def _numbers(column: pd.Series) -> np.ndarray | None:
    """A column's numbers, lists of lists flattened, or None for text."""
    flat: list = []

    def walk(value) -> None:
        if isinstance(value, str):
            raise TypeError(value)
        if np.ndim(value):
            for v in value:
                walk(v)
        else:
            flat.append(value)

    try:
        for value in column:
            walk(value)
        return np.asarray(flat, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def cluster(action: str) -> None:
    """``tests/slurm/cluster.sh up`` or ``clean`` (installs and starts munge and slurm; root only)."""
    done = subprocess.run(["bash", str(ROOT / "tests/slurm/cluster.sh"), action], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"slurm_study: cluster.sh {action} failed: {done.stderr.strip()[-500:]}")


def record(result: dict) -> None:
    """The record ``slurm_study`` from a result of :func:`main`."""
    slurm, local, equal = result["slurm"], result["one_job"], result["equal"]
    differ = [name for name, found in equal.items() if found["difference"]]
    verdict = f"differ in {', '.join(differ)}" if differ else "equal to the one job's to the bit"
    write_record(
        "slurm_study",
        "Does the generation study run sharded through SLURM, and does it judge as one job does?",
        f"{result['answers']} answers in {result['shards']} shards a rule, {slurm['submitted']} jobs through sbatch "
        f"in {minutes(slurm['answer_rules_s'])} (one job a rule: {minutes(local['answer_rules_s'])}); every "
        f"ablation, score, judgement and leaderboard row {verdict}",
        "[the generation study through SLURM](#the-generation-study-through-slurm-issue-82)",
        "benchmarks.slurm_study",
        {
            "answers": result["answers"],
            "shards": result["shards"],
            "jobs": slurm["submitted"],
            "slurm": minutes(slurm["answer_rules_s"]),
            "one_job": minutes(local["answer_rules_s"]),
            "judged_rows": equal["judged"]["rows"],
            "differ": differ,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=320)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args()
    from tests.slurm.local_profile import write_local_profile  # noqa: PLC0415 (the one-node cluster's profile)

    with tempfile.TemporaryDirectory(prefix="slurm-study-") as tmp:
        one, sharded = Path(tmp) / "one", Path(tmp) / "sharded"
        local = one_job(one, args.answers)
        shutil.copytree(one, sharded, symlinks=True)  # mtimes kept: the decoder and the answers are up to date
        for name in ARTIFACTS:  # the sharded run writes its own
            shutil.rmtree(sharded / "results/generation" / name)
        cluster("up")
        try:
            slurm = through_slurm(sharded, args.answers, args.shards, write_local_profile(Path(tmp) / "profile", 1))
        finally:
            cluster("clean")
        equal = compared(one / "results", sharded / "results", args.shards)
    result = {"answers": args.answers, "shards": args.shards, "one_job": local, "slurm": slurm, "equal": equal}
    write_result(args.out, "slurm_study", result)
    record(result)
    print(json.dumps({k: v for k, v in result.items() if k != "equal"}, indent=1))


if __name__ == "__main__":
    main()
