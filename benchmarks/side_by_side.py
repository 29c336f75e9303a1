"""Two commits' default runs, each alone on this machine one after the other, set side by side.

    python -m benchmarks.side_by_side BEFORE AFTER [--work DIR] [--config-from before | --configfile F] [--cores N]

Each commit is cloned from this repository into ``DIR/<commit>`` (``DIR/<commit>-config-<commit>`` with
``--config-from``), installed (``make install``, not timed) and run from an empty ``results/`` with the
Snakemake command of its own ``make run`` (``make -n run``; the report after it is not timed), under
``/usr/bin/time``: wall seconds from the first job's start to the last job's end (Snakemake's log), user
and system CPU seconds and peak RSS of the whole run.
A folder that already holds a finished run is reused, so a later call only runs what is missing.

It prints the per-rule table of ``benchmarks/rule_times.py`` (wall and CPU seconds of every rule, both runs),
the runs' totals and the ratio AFTER / BEFORE, and the artifacts whose numbers differ
(``python -m attnlens.pipeline.compare``). With ``--config-from before`` the AFTER commit runs the BEFORE commit's
``config/config.yaml`` (with ``--configfile F`` as well: BEFORE's ``F``, e.g. ``.test/config/config.yaml``, the
tiny run): their results must then be equal wherever the method is unchanged. The record
goes to ``results/bench/side_by_side.json``.

Run it with nothing else on the machine: two torch jobs on 2 cores slow each other down many times over.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from attnlens.pipeline.compare import differences
from benchmarks.rule_times import run_jobs, table

ROOT = Path(__file__).resolve().parent.parent


def _sh(cmd: list[str], cwd: Path, log: Path | None = None) -> subprocess.CompletedProcess:
    if log is None:
        return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    with log.open("w", encoding="utf-8") as fh:
        return subprocess.run(cmd, cwd=cwd, check=False, stdout=fh, stderr=subprocess.STDOUT, text=True)


def checkout(commit: str, folder: Path, config_from: str | None, config_path: str = "config/config.yaml") -> Path:
    """A clone of this repository at ``commit`` in ``folder`` (kept if it is there), installed with ``make install``,
    whose ``config/config.yaml`` is ``config_path`` of ``config_from`` (default: of ``commit``)."""
    if not (folder / ".git").exists():
        _sh(["git", "clone", "--quiet", str(ROOT), str(folder)], ROOT)
        _sh(["git", "checkout", "--quiet", commit], folder)
        config = _sh(["git", "show", f"{config_from or commit}:{config_path}"], ROOT).stdout
        (folder / "config" / "config.yaml").write_text(config, encoding="utf-8")
    _sh(["make", "install"], folder)
    return folder


def finished(folder: Path) -> bool:
    return (folder / "results" / "manifest.json").exists() and (folder / "run.time").exists()


def timed_run(folder: Path, cores: int) -> None:
    """The pipeline from an empty ``results/`` under ``/usr/bin/time -v``, with the commit's own ``make run``
    command (its Snakemake call; the report after it is not timed)."""
    shutil.rmtree(folder / "results", ignore_errors=True)
    shutil.rmtree(folder / ".snakemake", ignore_errors=True)
    planned = _sh(["make", "-n", "run", f"CORES={cores}"], folder).stdout.splitlines()
    line = next(ln for ln in planned if "snakemake --profile" in ln)
    cmd = ["/usr/bin/time", "-v", "-o", "run.time", *shlex.split(line)]
    out = _sh(cmd, folder, folder / "run.log")
    if out.returncode != 0:
        raise SystemExit(f"side_by_side: error: {folder}: the run failed; see {folder / 'run.log'}")


def totals(folder: Path) -> dict:
    """Pipeline wall seconds (first job start to last job end), CPU seconds and peak RSS of one run."""
    text = (folder / "run.time").read_text(encoding="utf-8")

    def field(name: str) -> float:
        return float(re.search(rf"{re.escape(name)}: ([\d.:]+)", text).group(1))

    jobs = run_jobs(folder)
    return {
        "pipeline_seconds": (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)).total_seconds(),
        "user_seconds": field("User time (seconds)"),
        "system_seconds": field("System time (seconds)"),
        "peak_rss_gb": round(field("Maximum resident set size (kbytes)") / 1e6, 2),
        "jobs": len(jobs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the commit measured first (e.g. the last commit before a speed-up)")
    parser.add_argument("after", help="the commit measured second")
    parser.add_argument("--work", type=Path, default=Path("/tmp/attnlens-side-by-side"), help="clones go here")
    parser.add_argument("--config-from", choices=["before"], help="run AFTER with BEFORE's config/config.yaml")
    parser.add_argument(
        "--configfile",
        help="run this config file of the checkout (e.g. .test/config/config.yaml) as its config/config.yaml",
    )
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="folder of side_by_side.json")
    args = parser.parse_args(argv)
    commits = {
        name: _sh(["git", "rev-parse", "--short", c], ROOT).stdout.strip()
        for name, c in (("before", args.before), ("after", args.after))
    }
    suffix = f"-config-{commits['before']}" if args.config_from else ""
    tag = f"-{Path(args.configfile).parent.parent.name.strip('.') or 'config'}" if args.configfile else ""
    folders = {
        "before": args.work / f"{commits['before']}{tag}",
        "after": args.work / f"{commits['after']}{suffix}{tag}",
    }
    for name, folder in folders.items():
        folder.parent.mkdir(parents=True, exist_ok=True)
        config_from = commits["before"] if name == "after" and args.config_from else None
        checkout(commits[name], folder, config_from, args.configfile or "config/config.yaml")
        if not finished(folder):
            print(f"side_by_side: running {name} ({commits[name]}) in {folder}", file=sys.stderr, flush=True)
            timed_run(folder, args.cores)
    runs = {name: totals(folder) for name, folder in folders.items()}
    ratio = runs["after"]["pipeline_seconds"] / runs["before"]["pipeline_seconds"]
    differ = differences(folders["before"] / "results", folders["after"] / "results")
    record = {
        "commits": commits,
        "config_from": args.config_from,
        "configfile": args.configfile,
        "runs": runs,
        "ratio": round(ratio, 3),
        "differences": differ,
    }
    print(table([folders["before"], folders["after"]]))
    for name, run in runs.items():
        print(
            f"\n{name} {commits[name]}: pipeline {run['pipeline_seconds']:.0f} s, user + sys "
            f"{run['user_seconds'] + run['system_seconds']:.0f} CPU s, peak RSS {run['peak_rss_gb']} GB"
        )
    print(f"\nratio after / before: {ratio:.3f}")
    print(f"artifacts that differ: {len(differ)}" + ("".join(f"\n  {d}" for d in differ[:50])))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "side_by_side.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
