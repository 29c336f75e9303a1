"""The one-document API (attnlens.api) against what the pipeline stored for the same example.

`.test`'s session run (``tiny_run``) is the reference: one of its showcased test examples is explained through
``attnlens.explain`` with the run's config and head importance, and every number is compared with the run's
artifact of the rule that computes it. The API calls the rules' own per-example functions on the same token ids
with the same settings, so they agree **bit for bit**: IG (scores, δ, gap, steps, rounds, probabilities), the
received attention and top-k partners, every explanation method, every similarity metric and its chance level,
and the explorer page's arrays. One number differs by float rounding only: the predicted probabilities of the
``predict`` rule, which runs its test documents in padded batches of ``predict.batch_size`` (IG's own forward, in
the attribution row, is exact) — bound: float32 logits, a few ulps (1e-6 absolute on probabilities).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import attnlens
from attnlens.attention.summaries import load_bands, load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations
from attnlens.classifier.selection import load_selection
from attnlens.cli import main as cli_main
from attnlens.errors import InputError
from attnlens.models import draw_decoder
from attnlens.models.checkpoints import load_tokenizer, packaged_model_dir
from attnlens.models.loading import import_classifier
from attnlens.pipeline.config import ModelConfig
from attnlens.render.explorer import read_explorer
from attnlens.similarity.metrics import load_similarity
from tests.support.helpers import GUARD, local_env, run_guarded

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def explained(tiny_run):
    """A showcased `.test` example explained through the API with the run's config and importance."""
    results = tiny_run / "results"
    eid = load_selection(results / "predictions/selection.json")[0]["example_id"]
    test = pd.read_parquet(results / "data/test.parquet").set_index("example_id")
    # one thread, as the run's jobs had (conftest): the same kernels' partition of the sums
    assert torch.get_num_threads() == 1
    classifier = attnlens.load(results)
    doc = attnlens.explain(
        test.loc[eid, "text"],
        classifier,
        config=tiny_run / "config/config.yaml",
        label=int(test.loc[eid, "label"]),
        example_id=eid,
    )
    return results, eid, doc


def test_ig_is_the_attribute_rules_row(explained):
    results, eid, doc = explained
    stored = load_attributions(sorted((results / "attributions").glob("shard*.parquet"))).set_index("example_id")
    want = stored.loc[eid]
    for column in ("input_ids", "scores", "rounds_steps", "rounds_delta", "probs", "probs_baseline"):
        np.testing.assert_array_equal(np.asarray(doc.attribution[column]), np.asarray(want[column]), err_msg=column)
    for column in ("delta", "gap", "n_steps", "converged", "target", "target_kind", "label", "showcased"):
        assert doc.attribution[column] == want[column], column


def test_attention_is_the_extract_rules_summary(explained):
    results, eid, doc = explained
    summary = load_summaries(sorted((results / "attention").glob("shard*.safetensors"))).examples[eid]
    np.testing.assert_array_equal(doc.received, summary.received.numpy())
    assert summary.topk is not None  # showcased examples get their top-k tables
    assert set(doc.partners) == set(summary.topk) == {"attended_idx", "attended_val", "attending_idx", "attending_val"}
    for name, stored in summary.topk.items():
        np.testing.assert_array_equal(doc.partners[name], stored.numpy(), err_msg=name)
    bands, ids = load_bands(sorted((results / "attention/bands").glob("*.safetensors")), eid)
    assert ids.tolist() == doc.input_ids and len(bands) == doc.received.shape[0]


def test_every_method_is_the_explain_rules(explained):
    results, eid, doc = explained
    stored = load_explanations(sorted((results / "explanations").glob("shard*.parquet")))
    stored = stored[stored["example_id"] == eid].set_index("method")
    assert sorted(stored.index) == sorted(doc.methods)
    for method, scores in doc.methods.items():
        np.testing.assert_array_equal(scores, np.asarray(stored.loc[method, "scores"]), err_msg=method)


def test_every_similarity_metric_is_the_compare_rules(explained):
    results, eid, doc = explained
    stored = load_similarity(sorted((results / "similarity").glob("shard*.parquet")))
    stored = stored[stored["example_id"] == eid].reset_index(drop=True)
    pd.testing.assert_frame_equal(doc.similarity.reset_index(drop=True), stored, check_exact=True)
    table = doc.agreement()  # the fixed mode's value and chance per configuration
    assert set(table.index.get_level_values("configuration")) == {"last", "all", "lower", "upper"}


def test_the_page_shows_what_build_explorers_shows(explained):
    results, eid, doc = explained
    page = next((results / "explorer").glob(f"{eid}*.html"))
    meta, arrays = read_explorer(page)
    ours = read_explorer_text(doc.html())
    assert ours[0]["tokens"] == meta["tokens"] and ours[0]["configurations"] == meta["configurations"]
    # the pipeline's page also marks the synthetic corpus's planted evidence: a document alone has none
    assert set(ours[1]) == set(arrays) - {"evidence"}
    for name, values in ours[1].items():
        np.testing.assert_array_equal(values, arrays[name], err_msg=name)


def test_the_prediction_agrees_with_the_predict_rule_to_float_rounding(explained):
    results, eid, doc = explained
    preds = pd.read_parquet(results / "predictions/test.parquet").set_index("example_id")
    np.testing.assert_allclose(list(doc.probabilities.values()), preds.loc[eid, "probs"], rtol=0, atol=1e-6)
    assert doc.prediction == doc.class_names[int(np.argmax(preds.loc[eid, "probs"]))]


def test_save_writes_artifacts_the_pipelines_readers_read(explained, tmp_path):
    _, eid, doc = explained
    paths = doc.save(tmp_path / "doc")
    assert load_attributions([paths["attributions"]]).iloc[0]["scores"].tolist() == doc.ig.tolist()
    assert set(load_explanations([paths["explanations"]])["method"]) == set(doc.methods)
    assert len(load_similarity([paths["similarity"]])) == len(doc.similarity)
    bands, ids = load_bands([paths["bands"]], eid)
    assert ids.tolist() == doc.input_ids and len(bands) == doc.received.shape[0]
    scores = json.loads(paths["scores"].read_text(encoding="utf-8"))
    assert scores["prediction"] == doc.prediction and scores["tokens"]["ig"] == doc.ig.tolist()
    assert read_explorer(paths["explorer"])[0]["tokens"] == doc.tokens
    frame = doc.to_frame()
    assert list(frame.columns[:3]) == ["token", "special", "ig"] and len(frame) == len(doc.input_ids)
    assert "<iframe srcdoc=" in doc.show().data and doc._repr_html_().startswith(f"<b>{eid}: ") and eid in repr(doc)
    assert "; attnlrp logit " in doc.summary()  # the explained logit and its δ, as IG's δ


def test_bad_arguments_are_one_clear_line(explained, tmp_path):
    classifier = attnlens.load(explained[0])
    with pytest.raises(InputError, match=r"document: text: expected a document with some text"):
        attnlens.explain("  \n", classifier)
    with pytest.raises(InputError, match=r"label: 7: expected a class index below 2"):
        attnlens.explain("some words", classifier, label=7)
    with pytest.raises(InputError, match=r"document: question: expected none: the model reads no question"):
        attnlens.explain("some words", classifier, question="Who?")
    with pytest.raises(InputError, match=r"expected an existing model folder"):
        attnlens.load(tmp_path / "nothing-here")
    with pytest.raises(InputError, match=r"importance: legacy: expected a \(6, 12\) head-importance matrix"):
        attnlens.explain("some words", classifier, importance={"legacy": np.ones(3), "fixed": np.ones(3)})


def read_explorer_text(html: str):
    """:func:`read_explorer` of a page held in memory."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "page.html"
        path.write_text(html, encoding="utf-8")
        return read_explorer(path)


# --- python -m attnlens explain ----------------------------------------------------------------------


def test_the_command_line_explains_a_file(tiny_run, tmp_path):
    """The whole door: a text file in, the page and scores.json out, from a fresh process."""
    text = pd.read_parquet(tiny_run / "results/data/test.parquet")["text"].iloc[0]
    words = " ".join(text.split() * 3)  # longer than the model's 128 tokens: the summary must say it was cut
    (tmp_path / "note.txt").write_text(words, encoding="utf-8")
    out = run_guarded(
        [
            sys.executable,
            "-m",
            "attnlens",
            "explain",
            str(tmp_path / "note.txt"),
            "--model",
            str(tiny_run / "results"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=tmp_path,
        timeout=GUARD["stage"],
        env=local_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "predicted" in out.stdout
    scores = json.loads((tmp_path / "out/scores.json").read_text(encoding="utf-8"))
    assert scores["example_id"] == "note" and len(scores["tokens"]["token"]) == len(scores["tokens"]["ig"]) == 128
    read = scores["input"]
    assert read["truncated"] and read["kept"] == 128 < read["tokens"], read
    assert f"128 of {read['tokens']} tokens (cut at the model's length)" in out.stdout
    assert "note: note: 1 of 1 documents are longer than max_length 128 and were cut" in out.stdout
    assert scores["notes"] and "were cut" in scores["notes"][0]
    assert (tmp_path / "out/note.html").exists()


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: d / "missing.txt", r"missing\.txt: \(file\): expected a text file, found nothing"),
        (lambda d: _write(d / "empty.txt", " \n"), r"empty\.txt: text: expected a document with some text"),
        (lambda d: _write(d / "latin1.txt", b"caf\xe9"), r"latin1\.txt: \(encoding\): expected UTF-8 text"),
    ],
    ids=["missing file", "empty text", "not UTF-8"],
)
def test_bad_command_line_input_is_one_line(tiny_run, tmp_path, capsys, make, said):
    path = make(tmp_path)
    assert cli_main(["explain", str(path), "--model", str(tiny_run / "results"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(r"^attnlens: error: .*" + said, err), err
    assert not (tmp_path / "o").exists()


def test_the_document_says_what_the_model_read_as_the_pipeline_does(explained):
    """Tokens, tokens kept and unknown tokens of the explained document: the numbers the pipeline's split manifest
    holds for the same example (both from attnlens.data.sources's truncation and unknown_tokens)."""
    results, eid, doc = explained
    manifest = json.loads((results / "data/split_manifest.json").read_text(encoding="utf-8"))
    entry = next(e for e in manifest["examples"] if e["example_id"] == eid)
    assert (doc.reading["tokens"], doc.reading["kept"]) == (entry["tokens"], entry["kept"])
    assert doc.reading["truncated"] == (entry["tokens"] > entry["kept"])
    assert doc.reading["unknown"] == 0 and doc.reading["content"] > 0
    assert len(doc.notes) == doc.reading["truncated"] and all("were cut" in note for note in doc.notes)


def test_an_out_that_is_a_file_is_one_line(tiny_run, tmp_path, capsys):
    """Checked before the model loads: an --out that names a file costs nothing and writes nothing."""
    (tmp_path / "doc.txt").write_text("a few words", encoding="utf-8")
    (tmp_path / "taken").write_text("mine", encoding="utf-8")
    assert (
        cli_main(
            [
                "explain",
                str(tmp_path / "doc.txt"),
                "--model",
                str(tiny_run / "results"),
                "--out",
                str(tmp_path / "taken"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{tmp_path / 'taken'}: (folder): expected a folder to write the document's files into, found a file" in err
    assert (tmp_path / "taken").read_text(encoding="utf-8") == "mine"


def test_a_folder_that_is_no_classifier_is_one_line(tiny_run, tmp_path, capsys):
    (tmp_path / "doc.txt").write_text("a few words", encoding="utf-8")
    (tmp_path / "model").mkdir()
    (tmp_path / "model/config.json").write_text("{", encoding="utf-8")
    assert cli_main(["explain", str(tmp_path / "doc.txt"), "--model", str(tmp_path / "model")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'model'}: checkpoint: expected a complete model folder" in err


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# --- every architecture behind the seam ---------------------------------------------------------------


@pytest.mark.parametrize("run", ["bigbird_run", "modernbert_run", "mistral_run"])
@pytest.mark.usefixtures("architecture_grid")  # the session run the two fixtures read (conftest)
def test_every_architecture_explains_as_its_run_did(run, request):
    """The architecture grid's BigBird (block-sparse), ModernBERT (windowed and full layers) and Mistral (causal
    sliding windows, shared key/value heads) runs: IG and the
    received attention of a showcased example through the API equal the run's (the same seam functions)."""
    results = request.getfixturevalue(run)
    eid = load_selection(results / "predictions/selection.json")[0]["example_id"]
    test = _test_split(results).set_index("example_id")
    config = results.parents[2] / "config/config.yaml"  # the grid's: its top-level sections are every run's
    assert torch.get_num_threads() == 1  # as the grid's jobs had (conftest): the same partition of the sums
    doc = attnlens.explain(
        test.loc[eid, "text"], attnlens.load(results), config=config, example_id=eid, label=int(test.loc[eid, "label"])
    )
    stored = load_attributions(sorted((results / "attributions").glob("shard*.parquet"))).set_index("example_id")
    np.testing.assert_array_equal(doc.ig, np.asarray(stored.loc[eid, "scores"]))
    summary = load_summaries(sorted((results / "attention").glob("shard*.safetensors"))).examples[eid]
    np.testing.assert_array_equal(doc.received, summary.received.numpy())


def _test_split(run_results: Path) -> pd.DataFrame:
    """The test split a run of a grid read (its dataset group's, listed in the findings' runs.csv)."""
    grid = run_results.parents[1]
    runs = pd.read_csv(grid / "findings/runs.csv").set_index("run")
    return pd.read_parquet(grid / "datasets" / runs.loc[run_results.name, "dataset_group"] / "data/test.parquet")


def test_a_decoder_classifier_saved_without_a_pad_token_id_explains_as_the_pipeline_reads_it(tmp_path, capsys):
    """A Qwen 3 sequence classifier whose config.json has no ``pad_token_id`` (its tokenizer has one): the command
    line explains a document (IG's steps go through the model in batches, which a decoder classifier can read only
    with a pad token), and its pad token is the one the pipeline's import of the same folder takes."""
    tokenizer = load_tokenizer(packaged_model_dir())
    model = draw_decoder(
        "qwen3",
        0,
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
    )
    model.config.pad_token_id = None
    folder = tmp_path / "qwen3-clf"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text()).get("pad_token_id") is None
    (tmp_path / "doc.txt").write_text("the compiler was designed at the lab by a small team", encoding="utf-8")
    assert cli_main(["explain", str(tmp_path / "doc.txt"), "--model", str(folder), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o/scores.json").read_text())["ig"]["delta"] is not None
    imported, _, _ = import_classifier(ModelConfig(source="classifier", name_or_path=str(folder)), ["0", "1"])
    assert attnlens.load(folder).model.config.pad_token_id == imported.config.pad_token_id == tokenizer.pad_token_id
