"""The GPU proof (``python -m benchmarks.gpu --tiny``, ``make gpu-proof``'s tiny twin) end to end: every
classification stage on a tiny model, on the CPU for an encoder and a decoder classifier, and on a card where one is.

The two CPU proofs are session runs (``gpu_proof_encoder``, ``gpu_proof_decoder``): processes of their own on a core
of their own beside the tests (tests/README.md), each about 20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.helpers import GUARD, ONE_THREAD, ROOT
from tests.support.session_runs import session_run

#: The stages the proof runs, in order.
STAGES = [
    "train_classifier",
    "predict",
    "estimate_head_importance",
    "extract_attention",
    "attribute",
    "explain",
    "evaluate_faithfulness",
]


def _gpu_proof(device: str, out_dir: Path, architecture: str = "longformer") -> dict:
    """``python -m benchmarks.gpu --tiny`` on ``device``: its ``gpu.json`` (``gpu_<architecture>.json``: a decoder)."""
    command = [sys.executable, "-m", "benchmarks.gpu", "--device", device, "--tiny", "--out", str(out_dir)]
    out = subprocess.run(
        [*command, "--architecture", architecture],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=GUARD["run"],
        env={**os.environ, **(ONE_THREAD if device == "cpu" else {})},  # one core: the tests and other runs hold theirs
    )
    assert out.returncode == 0, out.stderr[-3000:]
    name = "gpu.json" if architecture == "longformer" else f"gpu_{architecture}.json"
    return json.loads((out_dir / name).read_text(encoding="utf-8"))


@session_run("gpu_proof_encoder", seconds=20)
def _encoder(work: Path) -> dict:
    return _gpu_proof("cpu", work)


@session_run("gpu_proof_decoder", seconds=20)
def _decoder(work: Path) -> dict:
    return _gpu_proof("cpu", work, "mistral")


@pytest.fixture(scope="session")
def gpu_proof_encoder(session_runs) -> dict:
    """``gpu.json`` of the proof on the CPU with a tiny Longformer (:func:`_encoder`), once per session."""
    return session_runs.get("gpu_proof_encoder")


@pytest.fixture(scope="session")
def gpu_proof_decoder(session_runs) -> dict:
    """``gpu_mistral.json`` of the proof on the CPU with a tiny Mistral classifier (:func:`_decoder`)."""
    return session_runs.get("gpu_proof_decoder")


def test_gpu_proof_runs_on_cpu_with_a_tiny_model(gpu_proof_encoder):
    """``python -m benchmarks.gpu --device cpu --tiny``: every classification stage runs; gpu.json says so."""
    record = gpu_proof_encoder
    stages = record["stages"]
    assert list(stages) == STAGES
    assert record["documents"]["test"] >= 16 and record["device"] == "cpu"
    for name, row in stages.items():
        assert row["seconds"] > 0 and row["seconds_per_document"] > 0, name
    ig = record["ig"]
    assert ig["steps"] == 50 and ig["internal_batch_size"] == 8
    assert ig["flop_per_document"] == 2 * record["shape"]["parameters"] * 160 * 3 * 50
    assert ig["peak_fp16_flops"] is None and ig["compute_bound_seconds_per_document"] is None
    assert ig["speedup_vs_paper_t4"] == pytest.approx(43.5 / ig["seconds_per_document"], rel=0.01)


def test_gpu_proof_runs_a_decoder_on_cpu_with_a_tiny_model(gpu_proof_decoder):
    """``--architecture mistral``: the same stages on a decoder classifier (sliding window, grouped-query heads,
    last-token readout), the record naming it."""
    record = gpu_proof_decoder
    assert record["architecture"] == "mistral" and record["shape"]["key_heads"] == 2
    assert list(record["stages"]) == STAGES


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_gpu_proof_runs_on_cuda_with_a_tiny_model(tmp_path):
    """Where a GPU is: every classification stage places its model on it, in fp16 where asked, and IG's batch
    comes from the free memory (``make gpu-proof`` runs the paper's shape; this, its tiny twin)."""
    record = _gpu_proof("cuda", tmp_path)
    assert record["device"].startswith("cuda") and record["ig"]["bytes_per_step"] > 0
    assert all(row["peak_gpu_memory_mb"] > 0 for row in record["stages"].values())
