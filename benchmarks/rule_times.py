"""Per-rule wall and CPU seconds of finished runs, side by side (the before/after table of docs/benchmarks.md).

    python -m benchmarks.rule_times RUN_DIR [RUN_DIR ...]

Each ``RUN_DIR`` is a directory the pipeline ran in (``.snakemake/log/`` and ``results/benchmarks/``): wall
seconds come from the newest Snakemake log's job start and finish stamps (every rule, one-second
resolution), CPU seconds from the rules' benchmark files (rules with a ``benchmark:`` directive). Prints a
Markdown table, rules by the first run's wall seconds, and each run's sums.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.paper_shape import log_jobs, rule_benchmarks


def run_jobs(run: Path) -> list[dict]:
    """The finished jobs of the newest ``*.snakemake.log`` that ran any (a ``--report`` call's log has none)."""
    logs = sorted((run / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    for log in reversed(logs):
        if jobs := log_jobs(log):
            return [job for job in jobs if job["rule"] != "all"]
    raise SystemExit(f"rule_times: error: {run}: no Snakemake log with finished jobs under .snakemake/log")


def table(runs: list[Path]) -> str:
    """The Markdown table of per-rule job counts, wall seconds and CPU seconds for each run."""
    walls, cpus, counts = [], [], {}
    for i, run in enumerate(runs):
        wall: dict[str, float] = {}
        for job in run_jobs(run):
            wall[job["rule"]] = wall.get(job["rule"], 0.0) + job["seconds"]
            counts[job["rule"]] = counts.get(job["rule"], 0) + (i == 0)  # jobs counted in the first run
        walls.append(wall)
        cpus.append({rule: v["cpu_s"] for rule, v in rule_benchmarks(run / "results").items()})
    rules = sorted(counts, key=lambda r: -walls[0].get(r, 0.0))
    head = "| rule | jobs | " + " | ".join(f"wall s ({i + 1}) | CPU s ({i + 1})" for i in range(len(runs))) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(runs))]
    for rule in rules:
        cells = [
            f"{w.get(rule, 0):.0f} | {c[rule]:.0f}" if rule in c else f"{w.get(rule, 0):.0f} | –"
            for w, c in zip(walls, cpus, strict=True)
        ]
        lines.append(f"| `{rule}` | {counts[rule]} | " + " | ".join(cells) + " |")
    sums = " | ".join(f"{sum(w.values()):.0f} | {sum(c.values()):.0f}" for w, c in zip(walls, cpus, strict=True))
    lines.append(f"| **all jobs** | {sum(counts.values())} | {sums} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    print(table(parser.parse_args(argv).runs))


if __name__ == "__main__":
    main()
