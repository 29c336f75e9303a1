"""How long a job takes to start: each stage module's import in a fresh process, and each rule's start-up in a run.

    python -m benchmarks.startup [--out results/bench] [--run DIR] [--repeats 3]

1. **Imports.** For every ``attnlens.stages`` module (a rule's script imports exactly one), the wall seconds of
   ``python -c "import <module>"`` in a fresh process (the fastest of ``--repeats``, minus a bare interpreter's
   start, measured the same way), and which heavy libraries it loads (torch, transformers, captum,
   scikit-learn, seaborn, scipy.stats, numba, matplotlib).
2. **Rules** (with ``--run DIR``, a working directory whose ``results/`` a run finished): per rule, from its
   jobs' records (``results/logs/**/*.job.json``: ``startup_seconds`` from the process's start to the job's
   first line of work — the interpreter, Snakemake's preamble, the imports — and ``work_seconds`` after it),
   the median and largest start-up and the median work.

The record goes to ``<out>/startup.json``. Run it alone: a second process on a 2-core machine slows imports.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.measuring import write_result
from benchmarks.records import write_record

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "captum", "sklearn", "seaborn", "scipy.stats", "numba", "matplotlib")
_PROBE = (
    "import importlib, json, sys; importlib.import_module({m!r}); "
    "print(json.dumps([h for h in {h!r} if h in sys.modules]))"
)


def stage_modules() -> list[str]:
    """Every module a rule's function lives in (``attnlens.stages`` and its study packages)."""
    stages = ROOT / "src/attnlens/stages"
    return sorted(
        "attnlens.stages." + ".".join(p.relative_to(stages).with_suffix("").parts)
        for p in stages.rglob("*.py")
        if p.stem != "__init__"
    )


def _fastest(cmd: list[str], repeats: int) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        best, out = min(best, time.perf_counter() - start), done.stdout
    return best, out


def import_times(repeats: int) -> dict:
    bare, _ = _fastest([sys.executable, "-c", "pass"], repeats)
    modules = {}
    for module in stage_modules():
        seconds, out = _fastest([sys.executable, "-c", _PROBE.format(m=module, h=HEAVY)], repeats)
        modules[module] = {"seconds": round(seconds - bare, 3), "loads": json.loads(out.strip().splitlines()[-1])}
        print(f"{module:34s} {seconds - bare:6.2f} s  {' '.join(modules[module]['loads'])}", flush=True)
    return {"interpreter_seconds": round(bare, 3), "modules": modules}


def rule_startups(run: Path) -> dict:
    by_rule: dict[str, list[dict]] = {}
    for path in sorted((run / "results" / "logs").rglob("*.job.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if "startup_seconds" in record:
            by_rule.setdefault(record["rule"], []).append(record)
    out = {}
    for rule, records in sorted(by_rule.items()):
        startup = [r["startup_seconds"] for r in records]
        out[rule] = {
            "jobs": len(records),
            "startup_median": round(statistics.median(startup), 2),
            "startup_max": round(max(startup), 2),
            "work_median": round(statistics.median(r["work_seconds"] for r in records), 2),
        }
        print(
            f"{rule:28s} {len(records):3d} jobs  start-up {out[rule]['startup_median']:5.2f} s "
            f"(max {out[rule]['startup_max']:5.2f})  work {out[rule]['work_median']:6.2f} s",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--run", type=Path, default=None, help="a working directory with a finished run's results/")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", metavar="JSON", help="run nothing: record a startup.json written before")
    args = parser.parse_args(argv)
    if args.record:
        record_startup(json.loads(Path(args.record).read_text(encoding="utf-8")))
        return
    record = {
        "schema": "startup/v1",
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "imports": import_times(args.repeats),
    }
    if args.run is not None:
        record["rules"] = rule_startups(args.run)
    if args.run is not None:
        record["run"] = str(args.run)
    write_result(args.out, "startup", record)
    record_startup(json.loads((Path(args.out) / "startup.json").read_text(encoding="utf-8")))


def record_startup(result: dict) -> None:
    """The record ``job_start`` (benchmarks.records) of a result with a run's rules (``--run``), with its tables:
    each stage module's import in a fresh process, and each rule's start-up and work in the run."""
    if "rules" not in result:
        return
    imports = result["imports"]
    modules = [
        [f"`{m.removeprefix('attnlens.')}`", f"{v['seconds']:.2f} s", ", ".join(v["loads"]) or "–"]
        for m, v in sorted(imports["modules"].items(), key=lambda kv: -kv[1]["seconds"])
    ]
    rules = [
        [
            f"`{rule}`",
            r["jobs"],
            f"{r['startup_median']:.2f} s",
            f"{r['startup_max']:.2f} s",
            f"{r['work_median']:.2f} s",
        ]
        for rule, r in sorted(result["rules"].items(), key=lambda kv: -kv[1]["startup_median"])
    ]
    tables = {
        "imports": {"header": ["stage module", "import, fresh process", "heavy libraries it loads"], "rows": modules},
        "rules": {"header": ["rule", "jobs", "start-up, median", "start-up, largest", "work, median"], "rows": rules},
    }
    write_record("job_start", *startup_answer(result), tables=tables, provenance=result.get("provenance"))


def startup_answer(record: dict) -> tuple:
    """The question, answer and figures of ``job_start`` (benchmarks.records): the run's median job start-up (a warm
    job server's, in a local run of more than four jobs) beside a stage module's import in a fresh process."""
    starts = [r["startup_median"] for r in record["rules"].values()]
    fresh = [m["seconds"] + record["imports"]["interpreter_seconds"] for m in record["imports"]["modules"].values()]
    run = statistics.median(starts)
    answer = (
        f"median {run:.2f} s a job of a local run (warm job starts); {min(fresh):.1f}–{max(fresh):.1f} s a fresh "
        "process's interpreter and stage module"
    )
    figures = {"run_median_s": round(run, 2), "fresh_s": [round(min(fresh), 2), round(max(fresh), 2)]}
    section = "[`startup.json`](#startupjson-how-long-a-job-takes-to-start), "
    section += "[warm job starts](#warm-job-starts)"
    return "How long does a job take to start?", answer, section, "benchmarks.startup", figures


if __name__ == "__main__":
    main()
