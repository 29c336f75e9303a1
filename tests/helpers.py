"""Helpers shared by the tests (import them from here, not from ``conftest``)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from transformers import LongformerConfig, LongformerForSequenceClassification, LongformerModel

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(root, *args, cwd=None, timeout=900, prefix=(), slurm=False):
    """``snakemake --snakefile <root>/Snakefile *args`` (optionally behind ``prefix``, e.g. ``timeout``).

    Local runs see no SLURM commands (:func:`local_env`); ``slurm=True`` keeps them, for runs that submit to it.
    """
    return subprocess.run(
        [*prefix, *SNAKEMAKE, "--snakefile", str(root / "Snakefile"), *args],
        cwd=cwd or root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if slurm else local_env(),
    )


#: SLURM's client commands: Snakemake's SLURM plugin runs them whenever it loads (`scontrol show config`
#: waits ~9 s for a controller that is not running, e.g. after tests/slurm has stopped its cluster).
SLURM_COMMANDS = {"sinfo", "squeue", "sacct", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacctmgr"}


@functools.cache
def local_env() -> dict[str, str]:
    """This environment with a PATH that offers every command but SLURM's (built once per test session)."""
    shadow = Path(tempfile.mkdtemp(prefix="attnlens-bin-without-slurm-"))
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for tool in Path(folder).iterdir():
            link = shadow / tool.name
            if tool.name not in SLURM_COMMANDS and not link.is_symlink():
                link.symlink_to(tool)
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{shadow}"}


#: The tests that guard a claim needing the machine's help (a real SLURM, a real browser): CI sets their
#: switch (``.ci/run``), so that where the machine cannot give that help the run fails instead of skipping.
REQUIRED = {"slurm": "ATTNLENS_REQUIRE_SLURM", "browser": "ATTNLENS_REQUIRE_BROWSER"}


def unavailable(what: str, reason: str):
    """Skip a test whose ``what`` (a key of :data:`REQUIRED`) this machine lacks — or fail, where it is required."""
    if os.environ.get(REQUIRED[what]) == "1":
        pytest.fail(f"{what} test required ({REQUIRED[what]}=1) but {reason}")
    pytest.skip(reason)


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a finished run (modification times kept, so Snakemake sees nothing to do)."""
    shutil.copytree(run, dest, symlinks=True)
    return dest


def tiny_longformer(
    *, vocab_size: int = 50, hidden: int = 12, layers: int = 2, heads: int = 3, intermediate: int = 24,
    max_positions: int = 80, window: int = 4, pad_token_id: int = 1, num_labels: int | None = None, seed: int = 0,
    double: bool = False,
):  # fmt: skip
    """A seeded random Longformer small enough for exact checks: the encoder alone, or a classifier with
    ``num_labels`` classes; eval mode, float64 when ``double``."""
    config = LongformerConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        attention_window=window,
        pad_token_id=pad_token_id,
        **({"num_labels": num_labels} if num_labels else {}),
    )
    torch.manual_seed(seed)
    model = (LongformerForSequenceClassification if num_labels else LongformerModel)(config).eval()
    return model.double() if double else model
