"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def tiny_run(root, tmp_path_factory) -> Path:
    """A working directory where the .test configuration has run to the end, locally (once per session).

    Tests read it; a test that changes files works on a copy (:func:`copy_run`).
    """
    work = tmp_path_factory.mktemp("tiny-run")
    shutil.copytree(root / ".test" / "config", work / "config")
    out = run_snakemake(root, "--directory", str(work), "--cores", "2", "--show-failed-logs")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a finished run (modification times kept, so Snakemake sees nothing to do)."""
    shutil.copytree(run, dest, symlinks=True)
    return dest


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 BERT model (eval mode) and its tokenizer."""
    from transformers import AutoTokenizer, BertModel

    from attnlens.modeling import packaged_model_dir

    path = packaged_model_dir()
    return BertModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.fixture()
def tiny_classifier():
    """A 2-layer, 2-head random Longformer classifier with the MiniLM tokenizer, seeded."""
    from transformers import AutoTokenizer, LongformerConfig, LongformerForSequenceClassification

    from attnlens.modeling import packaged_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    tokenizer.model_max_length = 64
    config = LongformerConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=66,
        attention_window=16,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
    )
    torch.manual_seed(0)
    return LongformerForSequenceClassification(config).eval(), tokenizer
