"""The pipeline on real-shaped documents, given as a CSV and as class folders, with more shards than test documents.

Fourteen discharge-note-style documents of three services (:mod:`notes_corpus`): section headers, tabs,
numbered lists, ``[** … **]`` markers, non-ASCII punctuation, a byte-order mark, CRLF line ends, one note
six times longer than ``max_length`` and one shorter than the attention window, special-token strings,
Chinese and emoji in a pasted message, analysed with a classifier the user fine-tuned
(``model.source: classifier``) that never predicts one of the three classes.

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

import csv
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from attnlens.attention.summaries import TOPK_COLUMNS, load_summaries
from attnlens.classifier.prediction import encode_texts
from attnlens.data.tokens import structural_ids
from attnlens.io import load_json, load_tensors
from attnlens.models.checkpoints import load_classifier, load_tokenizer
from attnlens.render.explorer import read_explorer
from tests.support.helpers import GUARD, OWN_LENGTH, run_snakemake
from tests.support.hostile_corpus import HOSTILE_CLASS, parse_page
from tests.support.notes_corpus import FOLDERS_TARGETS, HOSTILE_NOTE, PAIR_SHARDS, PORTAL, SERVICES

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def folders_run(notes_runs) -> Path:
    """The notes as one folder of ``.txt`` files per class (a seeded random split), up to
    :data:`notes_corpus.FOLDERS_TARGETS`: the folders run of the session's :func:`notes_runs` (tests/conftest.py)."""
    return notes_runs["folders"]


@pytest.fixture(params=["csv", "folders"])
def run(request, notes_runs) -> tuple[str, Path]:
    """``(kind, working directory)``: each test that holds for both sources runs on both (both runs named as
    fixtures, so that the session starts both early: tests/support/session_runs.py)."""
    return request.param, notes_runs[request.param]


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
    roles = {e["role"] for e in selection["examples"]} | {r["role"] for r in selection["left_out"]}
    # three classes: a role per class, shown or left out with its reason, and no two-class role
    assert roles - {"fixed"} == {f"{r}_{c}" for r in ("most_confident", "random_correct") for c in range(3)}
    if kind == "csv":  # the hostile note, listed in predict.extra_ids
        assert [e["example_id"] for e in selection["examples"] if e["role"] == "fixed"] == [HOSTILE_NOTE]
    # the classifier never predicts oncology (class 1)
    assert {"most_confident_1", "random_correct_1"} <= {r["role"] for r in selection["left_out"]}
    if kind == "folders":
        return  # the run notes and the explorers are the CSV run's
    notes = pd.read_csv(work / "results/run_notes.csv")["note"]
    for r in selection["left_out"]:
        assert notes.str.contains(f"showcase role {r['role']} left out", regex=False).any()
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
    n_test = len(pd.read_parquet(work / "results/data/test.parquet"))
    assert sum(c["n_true"] for c in per_class.values()) == metrics["n_examples"] == n_test
    assert set(per_class) == {"0", "1", "2"} and per_class["1"]["n_predicted"] == 0
    if kind == "csv":
        assert per_class["1"]["n_true"] == 0 and "no test example of this class" in per_class["1"]["note"]
    assert np.isfinite(metrics["macro_f1"])


def test_rerun_has_nothing_to_do(run, root):
    """Paths with spaces, ids with a folder separator: a finished run stays finished."""
    kind, work = run
    out = run_snakemake(root, "--directory", str(work), "-n", *(FOLDERS_TARGETS if kind == "folders" else ()))
    assert out.returncode == 0 and "Nothing to be done" in out.stdout + out.stderr, out.stdout + out.stderr


def test_a_role_that_names_nothing_is_skipped_with_a_note(notes_run):
    """The default figures.topk_role (most_confident_1) names a class the classifier never predicts: the top-k
    figures and tables say so, the run goes on to the manifest, and the run notes carry one line."""
    res = notes_run / "results"
    notes = pd.read_csv(res / "run_notes.csv")
    skipped = notes[notes["rule"] == "count_topk"]["note"].tolist()
    assert skipped == [
        "figures.topk_role most_confident_1 names no example of this run (no test example is "
        "predicted 1): top-k figures and tables skipped"
    ], notes.to_string()
    for name in ("attended_by_type", "intersection_by_position", "token_occurrences"):
        table = pd.read_csv(res / f"paper/tables/topk_{name}.csv")
        assert len(table) == 0 and list(table.columns) == list(TOPK_COLUMNS[name])
    for stem in ("topk_counts", "topk_intersections", "topk_token_occurrences"):
        assert (res / f"paper/figures/{stem}.png").stat().st_size > 0
    assert (res / "manifest.json").exists() and (res / "explorer").is_dir()


def test_special_token_strings_in_a_document_are_text_in_every_stage(notes_run, own_classifier):
    """Test note 2 starts with a portal message spelling [CLS], <s> …: every stage saw the same ids, with
    structural tokens only at the two ends, and the unknown characters are counted in the run notes."""
    res = notes_run / "results"
    test = pd.read_parquet(res / "data/test.parquet").set_index("example_id")
    eid = next(e for e, text in test["text"].items() if text.startswith(PORTAL))
    tokenizer = load_tokenizer(own_classifier)
    expected = encode_texts(tokenizer, [test.loc[eid, "text"]], max_length=128).input_ids[0]
    structural = structural_ids(tokenizer)
    assert [i for i in expected if i in structural] == [expected[0], expected[-1]]
    assert tokenizer.unk_token_id in expected and tokenizer.mask_token_id not in expected
    attributions = pd.concat(pd.read_parquet(p) for p in sorted((res / "attributions").glob("shard*.parquet")))
    seen = {"attribute": attributions.set_index("example_id").loc[eid, "input_ids"]}
    seen["extract_attention"] = (
        load_summaries(sorted((res / "attention").glob("shard*.safetensors"))).examples[eid].input_ids
    )
    for stage, ids in seen.items():
        assert [int(i) for i in ids] == expected, stage
    notes = pd.read_csv(res / "run_notes.csv")["note"]
    unknown = notes[notes.str.contains("content tokens are [UNK]", regex=False)].tolist()
    by_split = {split: [n for n in unknown if f"{split}: " in n] for split in ("train", "test")}
    assert [len(v) for v in by_split.values()] == [1, 1], unknown
    assert by_split["train"][0].startswith("train: 0 of ")  # English notes only
    assert int(by_split["test"][0].split("test: ")[1].split(" of ")[0]) >= 3  # 胸, 痛, 😀


def test_hostile_content_is_inert_in_every_output(notes_run):
    """A hostile class name, note id and text (tests/support/hostile_corpus.py) went through every stage: each output
    format holds them as text — parsed as HTML, read as CSV, scanned as LaTeX and Markdown."""
    res = notes_run / "results"
    pages = sorted(p for p in res.rglob("*.html") if "logs" not in p.parts)
    explorer = [p for p in pages if p.parent.name == "explorer"]
    assert any(read_explorer(p)[0]["example_id"] == HOSTILE_NOTE for p in explorer)
    assert len(pages) > len(explorer)  # the attention and attribution overlays too
    for path in pages:
        page = parse_page(path)
        for tag, attrs in page.tags:
            assert not [a for a in attrs if a.startswith("on")], (path.name, tag, attrs)
        csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        assert len(csp) == 1, path.name
        ids = [a.get("id") for t, a in page.tags if t == "script"]
        assert ids == (["attnlens-meta", "attnlens-data", None] if path in explorer else []), path.name
    meta = next(read_explorer(p)[0] for p in explorer if read_explorer(p)[0]["example_id"] == HOSTILE_NOTE)
    assert meta["info"]["outputs"].keys() == set(SERVICES) and HOSTILE_NOTE in meta["title"]
    formula = re.compile(r"[=+\-@\t\r]")
    checked = 0
    for path in sorted(res.rglob("*.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    if formula.match(cell) and cell not in ("-", "+", "@"):
                        float(cell)  # only a number may start so
                    checked += 1
    assert checked > 1000
    for path in sorted(res.rglob("*.tex")):
        tex = path.read_text(encoding="utf-8")
        assert "\\input" not in tex and "\\write18" not in tex and "<script>" not in tex, path.name
    for path in sorted(res.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        assert "<svg" not in text and "<script" not in text and "<img" not in text, path.name
    assert HOSTILE_CLASS in load_json(res / "data/split_manifest.json", "split_manifest/v1")["classes"]


@pytest.mark.workflow
def test_an_existing_classifier_runs_every_stage_without_training(notes_run, own_classifier):
    res = notes_run / "results"
    ran = {p.name for p in (res / "logs").iterdir()}
    assert "import_classifier" in ran and not {"build_base_model", "train_classifier"} & ran, sorted(ran)
    assert not (res / "models/base").exists() and not (res / "models/train_metrics.json").exists()
    # the given weights, unchanged
    given = load_file(own_classifier / "model.safetensors")
    saved = load_file(res / "models/finetuned/model.safetensors")
    assert all(torch.equal(saved[k], v) for k, v in given.items())  # copied, not recomputed: bit for bit
    # predict used them: its logits are the saved model's own on the test split
    predictions = pd.read_parquet(res / "predictions/test.parquet")
    model, tokenizer = load_classifier(own_classifier)
    tokenizer.model_max_length = OWN_LENGTH
    with torch.no_grad():
        for row in predictions.head(3).to_dict("records"):
            text = pd.read_parquet(res / "data/test.parquet").set_index("example_id").loc[row["example_id"], "text"]
            enc = tokenizer(text, truncation=True, max_length=OWN_LENGTH, return_tensors="pt")
            logits = model(**enc).logits[0].numpy()
            # float32 both times, but predict batches and pads (and runs the blocked attention): float32 rounding
            # of logits ≲ 1 through 2 layers, ~1e-6 measured; 1e-4 / 1e-5 leaves room for another kernel set
            np.testing.assert_allclose(logits, row["logits"], rtol=1e-4, atol=1e-5)
            assert int(logits.argmax()) == row["pred"]
    # length and window from the checkpoint, said in the log and the model's provenance
    log = (res / "logs/import_classifier/import_classifier.log").read_text(encoding="utf-8")
    assert "model.max_length 128 (from the checkpoint); model.attention_window [16, 16] (from the checkpoint)" in log
    prov = json.loads((res / "models/finetuned/provenance.json").read_text())
    assert prov["shape"]["origin"] == {"max_length": "checkpoint", "attention_window": "checkpoint"}
    assert json.loads((res / "data/split_manifest.json").read_text())["max_length"] == OWN_LENGTH
    # every artifact of the two studies, none of the third, and the manifest lists only what was selected
    expected = [
        "paper/tables/similarity",
        "paper/figures/faithfulness_curves.png",
        "explorer",
        "manifest.json",
        "attributions/embeddings.parquet",
        "topology/claim.json",
        "topology/figures",
    ]
    for path in expected:
        assert (res / path).exists(), path
    assert not (res / "pairs").exists() and not (res / "data/pairs_test.parquet").exists()
    manifest = json.loads((res / "manifest.json").read_text())
    rules = set(manifest["summary"]["rules"])
    assert "import_classifier" in rules and "bottleneck_distances" in rules and not any("pair" in r for r in rules)
    assert not manifest["summary"]["without_provenance"]


@pytest.mark.workflow
def test_the_report_holds_only_the_selected_studies(root, notes_run, tmp_path):
    report = tmp_path / "report.html"  # outside the shared run: its results stay as the run left them
    out = run_snakemake(root, "--directory", str(notes_run), "--report", str(report), timeout=GUARD["plan"])
    assert out.returncode == 0, out.stderr[-3000:]
    html = report.read_text(encoding="utf-8", errors="replace")
    assert "1 Classification (Longformer)" in html and "2 Topology" in html and "3 Siamese pairs" not in html


@pytest.mark.workflow
def test_a_rerun_of_the_existing_classifier_has_nothing_to_do(root, notes_run):
    out = run_snakemake(root, "--directory", str(notes_run), "-n", "--cores", "1")
    assert out.returncode == 0 and "Nothing to be done" in out.stdout + out.stderr, out.stdout[-2000:]
