"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, run_snakemake, tiny_longformer
from transformers import AutoTokenizer, BertModel

from attnlens.modeling import packaged_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 BERT model (eval mode) and its tokenizer."""

    path = packaged_model_dir()
    return BertModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.fixture()
def tiny_classifier():
    """A 2-layer, 2-head random Longformer classifier with the MiniLM tokenizer, seeded."""

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    tokenizer.model_max_length = 64
    model = tiny_longformer(vocab_size=tokenizer.vocab_size, hidden=16, heads=2, intermediate=32, max_positions=66,
                            window=16, pad_token_id=tokenizer.pad_token_id, num_labels=2, seed=0)  # fmt: skip
    return model, tokenizer
