"""The pipeline on real-shaped documents, given as a CSV and as class folders, with more shards than test documents.

A dozen discharge-note-style documents (:mod:`notes_corpus`): section headers, tabs, numbered lists,
``[** … **]`` markers, non-ASCII punctuation, a byte-order mark, CRLF line ends, one note six times
longer than ``max_length`` and one shorter than the attention window, analysed with a classifier the
user fine-tuned (``model.source: classifier``).

- The CSV: the session's ``notes_run`` (tests/conftest.py), every stage of the classification and topology
  studies. Three of the notes are the test split, all of one class, and every sharded stage has more
  shards than that, so most shards are empty. The run must finish, and its artifacts must say what was
  done to the data.
- The class folders (:func:`folders_run`): what the folder source changes — reading, splitting, naming,
  truncating — through the predictions, plus study 3's pair shards (which do not read the notes), four
  of them for its three test pairs. The stages after the predictions read the same artifacts whatever the source,
  and the CSV run covers them.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import GUARD, run_snakemake, tiny_config, write_config
from notes_corpus import SERVICES, write_notes

from attnlens.io import load_json, load_tensors

pytestmark = pytest.mark.workflow

#: The folders run's targets: the predictions (and the data they read), and study 3's pair shards: 4 for the 3
#: test pairs of the smallest synthetic pair set (6 pairs, half of them held out).
PAIR_SHARDS = 4
FOLDERS_TARGETS = ("results/predictions/selection.json",
                   *(f"results/pairs/scores_shard{k}.parquet" for k in range(PAIR_SHARDS)))  # fmt: skip


@pytest.fixture(scope="module")
def folders_run(root, own_classifier, tmp_path_factory) -> Path:
    """The notes as one folder of ``.txt`` files per class (a seeded random split), up to :data:`FOLDERS_TARGETS`."""
    work = tmp_path_factory.mktemp("notes-folders")
    _, folders = write_notes(work / "input")
    data = {"source": "folders", "path": str(folders), "classes": list(SERVICES), "seed": 7, "test_fraction": 0.25}
    cfg = tiny_config(root, data=data, model={"source": "classifier", "name_or_path": str(own_classifier)})
    cfg["pairs"]["attribution"]["n_shards"] = PAIR_SHARDS
    cfg["pairs"]["data"]["synthetic"]["n_pairs"] = 6
    cfg["pairs"]["exact"]["enabled"] = False
    write_config(work, cfg)
    out = run_snakemake(root, "--directory", str(work), *FOLDERS_TARGETS, "--cores", "2", "--show-failed-logs",
                        timeout=GUARD["stage"])  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return work


@pytest.fixture(params=["csv", "folders"])
def run(request) -> tuple[str, Path]:
    """``(kind, working directory)``: each test that holds for both sources runs on both."""
    return request.param, request.getfixturevalue("notes_run" if request.param == "csv" else "folders_run")


def _shard_groups(results: Path) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for path in sorted(results.rglob("*shard*.*")):
        if path.suffix in (".parquet", ".safetensors") and "logs" not in path.parts:
            groups.setdefault(re.sub(r"shard\d+", "shard*", str(path.relative_to(results))), []).append(path)
    return groups


def test_every_shard_is_a_typed_artifact(run):
    kind, work = run
    groups = _shard_groups(work / "results")
    assert len(groups) >= (8 if kind == "csv" else 2), sorted(groups)  # folders: the pair scores and matrices
    n_empty = 0
    for name, paths in groups.items():
        if name.endswith(".safetensors"):
            for p in paths:
                load_tensors(p)  # an empty shard is a readable file with provenance
            continue
        schemas = {pq.read_schema(p).remove_metadata() for p in paths}
        assert len(schemas) == 1, f"{name}: the shards disagree on their columns: {schemas}"
        (schema,) = schemas
        assert not [f.name for f in schema if str(f.type) == "null"], f"{name}: untyped columns"
        n_empty += sum(pq.read_metadata(p).num_rows == 0 for p in paths)
    n_test = 3 if kind == "csv" else len(pd.read_parquet(work / "results/data/pairs_test.parquet"))
    assert n_test < (4 if kind == "csv" else PAIR_SHARDS)
    assert n_empty >= (4 if kind == "csv" else PAIR_SHARDS - n_test)  # the run really had empty shards


def test_dataset_is_named_by_its_source(run):
    kind, work = run
    name = "discharge notes" if kind == "csv" else "discharge_notes"
    assert load_json(work / "results/data/split_manifest.json", "split_manifest/v1")["name"] == name
    if kind == "folders":
        return  # the tables are the CSV run's
    summary = pd.read_parquet(work / "results/similarity/summary.parquet")
    assert set(summary["dataset"]) == {name}
    tables = work / "results/paper/tables/similarity"
    assert f"{name}, 3 examples" in (tables / "table1_similarity.md").read_text(encoding="utf-8")
    assert not [p for p in tables.iterdir() if "synthetic" in p.read_text(encoding="utf-8", errors="ignore")]


def test_truncation_is_counted_and_reported(run):
    kind, work = run
    manifest = load_json(work / "results/data/split_manifest.json", "split_manifest/v1")
    cut = manifest["truncation"]
    assert manifest["max_length"] == 128
    assert sum(s["truncated"] for s in cut.values()) >= 1 and cut["train"]["tokens_kept"] < cut["train"]["tokens"]
    longest = max(manifest["examples"], key=lambda e: e["tokens"])
    assert longest["tokens"] > 5 * 128 and longest["kept"] == 128
    log = (work / "results/logs/prepare_dataset/prepare_dataset.log").read_text(encoding="utf-8")
    assert "longer than max_length 128" in log
    if kind == "csv":  # the run notes are written at the end of a whole run
        notes = pd.read_csv(work / "results/run_notes.csv")
        assert notes["note"].str.contains("longer than max_length 128 and were cut").any()


def test_showcase_roles_hold_or_are_left_out(run):
    kind, work = run
    selection = load_json(work / "results/predictions/selection.json", "selection/v1")
    for e in selection["examples"]:
        role, label, pred = e["role"], e["label"], e["pred"]
        if role.startswith("most_confident_"):
            assert pred == int(role.rsplit("_", 1)[1]), e
        if role.startswith("random_correct_"):
            assert pred == label == int(role.rsplit("_", 1)[1]), e
        if role in ("false_positive", "false_negative"):
            assert (label, pred) == ((0, 1) if role == "false_positive" else (1, 0)), e
    roles = {e["role"] for e in selection["examples"]} | {r["role"] for r in selection["left_out"]}
    assert {"false_positive", "false_negative", "most_confident_0", "most_confident_1"} <= roles
    if kind == "folders":
        return  # the run notes and the explorers are the CSV run's
    notes = pd.read_csv(work / "results/run_notes.csv")["note"]
    for r in selection["left_out"]:
        assert notes.str.contains(f"showcase role {r['role']} left out", regex=False).any()
    # the CSV's test split holds cardiology notes only: no oncology note can be "correct"
    assert "random_correct_1" in {r["role"] for r in selection["left_out"]}
    explorers = sorted((work / "results/explorer").glob("*.html"))
    assert len(explorers) == len({e["example_id"] for e in selection["examples"]})


def test_no_missing_number_without_its_reason(notes_run):
    """Every empty cell of every table sits in a row whose ``note`` says why (or in a cell that says it)."""
    work = notes_run
    unexplained = []
    for path in sorted((work / "results").rglob("*.csv")):
        frame = pd.read_csv(path, keep_default_na=False, na_values=["", "nan", "NaN"])
        if not len(frame) or "run_notes" in path.name:
            continue
        empty = frame.isna()
        if "note" in frame.columns:
            empty = empty.loc[frame["note"].isna() | (frame["note"].astype(str).str.strip() == "")]
        for col in [c for c in empty.columns if c != "note" and empty[c].any()]:
            unexplained.append(f"{path.relative_to(work)}: {col} ({int(empty[col].sum())} rows)")
    assert not unexplained, "\n".join(unexplained)


def test_run_notes_say_what_could_not_be_computed(notes_run):
    work = notes_run
    notes = pd.read_csv(work / "results/run_notes.csv")
    manifest = load_json(work / "results/manifest.json", "manifest/v1")
    assert manifest["summary"]["without_provenance"] == [] and manifest["summary"]["n_notes"] == len(notes)
    # three cardiology notes: no different-class pair for the topology claim
    claim = notes[notes["rule"] == "bottleneck_distances"]["note"]
    assert claim.str.contains("every example has the same class").any(), notes.to_string()
    claims = load_json(work / "results/topology/claim.json", "topology_claim/v1")["claims"]
    assert all(c["note"] for c in claims) and all(c["gap"] is None or c["gap"] != c["gap"] for c in claims)


def test_metrics_count_every_class(run):
    kind, work = run
    metrics = load_json(work / "results/predictions/metrics.json", "predictions/v1")
    per_class = metrics["per_class"]
    assert sum(c["n_true"] for c in per_class.values()) == metrics["n_examples"] == 3
    if kind == "csv":
        assert per_class["1"]["n_true"] == 0 and "no test example of this class" in per_class["1"]["note"]
    assert np.isfinite(metrics["macro_f1"])


def test_rerun_has_nothing_to_do(run, root):
    """Paths with spaces, ids with a folder separator: a finished run stays finished."""
    kind, work = run
    out = run_snakemake(root, "--directory", str(work), "-n", *(FOLDERS_TARGETS if kind == "folders" else ()))
    assert out.returncode == 0 and "Nothing to be done" in out.stdout + out.stderr, out.stdout + out.stderr
