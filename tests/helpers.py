"""Helpers shared by the tests (import them from here, not from ``conftest``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(root, *args, cwd=None, timeout=900, prefix=()):
    """``snakemake --snakefile <root>/Snakefile *args`` (optionally behind ``prefix``, e.g. ``timeout``)."""
    return subprocess.run(
        [*prefix, *SNAKEMAKE, "--snakefile", str(root / "Snakefile"), *args],
        cwd=cwd or root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a finished run (modification times kept, so Snakemake sees nothing to do)."""
    shutil.copytree(run, dest, symlinks=True)
    return dest
