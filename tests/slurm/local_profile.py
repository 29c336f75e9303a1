"""workflow/profiles/slurm with its placeholders filled for the one-node cluster of tests/slurm/cluster.sh.

    python tests/slurm/local_profile.py /tmp/slurm-local      # writes /tmp/slurm-local/config.yaml
    mkdir -p /tmp/try && cp -r .test/config /tmp/try/
    snakemake --profile /tmp/slurm-local --directory /tmp/try

Everything goes to the partition `debug`, no job asks for a GPU (the node has none), every job fits
in 2.5 GB and 2 CPUs, and job status comes from `squeue` with short waits (the test node runs no
accounting daemon, and without one the plugin's default `sacct` queries would make Snakemake wait
forever). The rest — retries aside — is the production profile as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

PROFILE = Path(__file__).resolve().parents[2] / "workflow" / "profiles" / "slurm" / "config.yaml"


def local_profile(max_threads: int = 2, mem_mb: int = 2500) -> dict:
    profile = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
    node = {"slurm_partition": "debug", "mem_mb": mem_mb, "gpu": 0}
    profile["default-resources"] = {"slurm_partition": "debug", "mem_mb": mem_mb, "runtime": 30}
    for values in profile["set-resources"].values():
        values.update(node)
    profile.pop("slurm-partition-config")  # one partition: every job is sent to it by name
    profile.update(
        {
            "max-threads": max_threads,  # a rule asking for more CPUs than the node has would never be scheduled
            "jobs": 4,
            "retries": 0,
            "keep-going": False,
            "latency-wait": 5,
            "slurm-requeue": False,
            "slurm-no-account": True,
            "slurm-status-command": "squeue",
            "slurm-init-seconds-before-status-checks": 2,
            "seconds-between-status-checks": 2,
            "slurm-keep-successful-logs": True,  # one log per SLURM job id, kept as the record of what ran where
        }
    )
    return profile


def write_local_profile(folder: str | Path, max_threads: int = 2) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    profile = local_profile(max_threads=max_threads)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/slurm/local_profile.py <profile folder>")
    print(write_local_profile(sys.argv[1]))
