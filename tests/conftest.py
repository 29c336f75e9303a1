"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM, and the session's
end-to-end runs (tests/README.md lists which tests read which run)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import (
    GUARD,
    ROOT,
    build_classifier,
    run_snakemake,
    run_snakemakes_together,
    tiny_config,
    tiny_longformer,
    write_config,
)
from notes_corpus import FOLDERS_TARGETS, HOSTILE_NOTE, PAIR_SHARDS, SERVICES, write_notes
from transformers import AutoTokenizer, BertModel

from attnlens.models.loading import packaged_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_report_header(config) -> str:
    """The CPU kernels float results depend on (tests/test_kernel_sets.py reads this line)."""
    libraries = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
    env = ", ".join(f"{k}={os.environ[k]}" for k in libraries if os.environ.get(k))
    return f"CPU kernels: {torch.backends.cpu.get_cpu_capability()}" + (f" ({env})" if env else "")


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
    out = run_snakemake(root, "--directory", str(work), "--cores", "2", "--show-failed-logs", timeout=GUARD["run"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def own_classifier(tmp_path_factory) -> Path:
    """A Longformer classifier of the notes' three services (tests/notes_corpus.py), fine-tuned and saved as a user
    would (:func:`helpers.build_classifier`); it never predicts oncology (class 1), the class of the default
    ``figures.topk_role`` (most_confident_1)."""
    return build_classifier(tmp_path_factory.mktemp("my-classifier") / "longformer-clf", labels=SERVICES, never=1)


#: The notes run's shard counts: more shards than its three test notes, so most shards are empty.
NOTES_SHARDS = {"attention": {"n_shards": 4}, "attribution": {"n_shards": 4}, "topology": {"n_shards": 4}}


@pytest.fixture(scope="session")
def notes_runs(root, own_classifier, tmp_path_factory) -> dict[str, Path]:
    """Real-shaped data analysed with the user's own classifier (:func:`own_classifier`), two runs side by side on
    one core each (:func:`helpers.run_snakemakes_together`), once per session:

    * ``csv``: the discharge notes as a CSV (three classes, one never predicted, one named by hostile text; three
      test notes, all of one class, one of them hostile and showcased by `predict.extra_ids`), the classification
      and topology studies, more shards than test notes. test_real_data, test_existing_classifier and
      test_browser read it.
    * ``folders``: the same notes as one folder of ``.txt`` files per class (a seeded random split), up to the
      predictions, plus study 3's pair shards (:data:`notes_corpus.FOLDERS_TARGETS`). test_real_data reads it.
    """
    csv_work, folders_work = tmp_path_factory.mktemp("notes-csv"), tmp_path_factory.mktemp("notes-folders")
    table, _ = write_notes(csv_work / "input")
    data = {"source": "file", "path": str(table), "id_column": "note_id", "classes": list(SERVICES), "seed": 7}
    model = {"source": "classifier", "name_or_path": str(own_classifier)}
    write_config(csv_work, tiny_config(root, data=data, model=model, studies=["classification", "topology"],
                                       predict={"extra_ids": [HOSTILE_NOTE]}, **NOTES_SHARDS))  # fmt: skip
    _, folders = write_notes(folders_work / "input")
    data = {"source": "folders", "path": str(folders), "classes": list(SERVICES), "seed": 7, "test_fraction": 0.25}
    cfg = tiny_config(root, data=data, model=model)
    cfg["pairs"]["attribution"]["n_shards"] = PAIR_SHARDS
    cfg["pairs"]["data"]["synthetic"]["n_pairs"] = 6
    cfg["pairs"]["exact"]["enabled"] = False
    write_config(folders_work, cfg)
    common = ["--cores", "1", "--show-failed-logs"]
    runs = {"csv": ["--directory", str(csv_work), *common],
            "folders": ["--directory", str(folders_work), *FOLDERS_TARGETS, *common]}  # fmt: skip
    for name, out in run_snakemakes_together(root, runs, timeout=GUARD["run"]).items():
        assert out.returncode == 0, f"notes {name} run:\n" + out.stdout[-6000:]
    return {"csv": csv_work, "folders": folders_work}


@pytest.fixture(scope="session")
def notes_run(notes_runs) -> Path:
    """The CSV run of :func:`notes_runs`: real-shaped data analysed with the user's own classifier."""
    return notes_runs["csv"]


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


#: Each architecture run's sharded rules run one shard: sharding is the tiny and notes runs' to test.
ONE_SHARD = {section: {"n_shards": 1} for section in ("attention", "attribution", "explanations", "topology")}
#: The architecture grid's models: the packaged MiniLM converted to a BigBird (blocks of 8, one random block:
#: block-sparse above 56 tokens), and a ModernBERT of its sizes drawn at random and trained from scratch
#: (``model.source: from_config``, window 32, every third layer full).
ARCHITECTURES = {
    "bigbird": {
        "model": {"attention_window": None, "architecture": "bigbird", "block_size": 8, "num_random_blocks": 1}
    },
    "modernbert": {"model": {"source": "from_config", "architecture": "modernbert"}},
}
#: Its seeds: the first run of each model is built to the end, the second up to what rule findings reads.
ARCHITECTURE_SEEDS = (7, 8)


@pytest.fixture(scope="session")
def architecture_grid(root, tmp_path_factory) -> Path:
    """The `.test` configuration as a grid of the other architectures behind the seam × two fine-tuning seeds, with
    the classification and topology studies, once per session: the seed-7 runs to the end (test_bigbird and
    test_modernbert read them), the seed-8 runs as far as the findings need, and the findings across the four
    (test_grid reads them)."""
    work = tmp_path_factory.mktemp("architecture-grid")
    cfg = tiny_config(root, studies=["classification", "topology"], findings={"sanity_examples": 2}, **ONE_SHARD)
    cfg["grid"] = {"models": ARCHITECTURES, "seeds": list(ARCHITECTURE_SEEDS)}
    write_config(work, cfg)
    first = [f"results/runs/default__{m}__s{ARCHITECTURE_SEEDS[0]}/manifest.json" for m in ARCHITECTURES]
    # one thread a job, two jobs at a time: the runs' chains of short jobs overlap (as two one-core runs side by
    # side do, helpers.run_snakemakes_together) instead of one two-thread job at a time
    out = run_snakemake(root, "--directory", str(work), "--cores", "2", "--max-threads", "1", "--show-failed-logs",
                        *first, "results/findings/findings.csv", timeout=GUARD["run"])  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def bigbird_run(architecture_grid) -> Path:
    """The results of the first BigBird run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__bigbird__s{ARCHITECTURE_SEEDS[0]}"


@pytest.fixture(scope="session")
def modernbert_run(architecture_grid) -> Path:
    """The results of the first ModernBERT run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__modernbert__s{ARCHITECTURE_SEEDS[0]}"
