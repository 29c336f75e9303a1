import json

import numpy as np
import pandas as pd
import pytest

from attnlens.data.reading import document_reading
from attnlens.data.sources import compute_split, load_examples, prepare_dataset, sha256_text
from attnlens.errors import InputError
from attnlens.io import load_json, load_parquet
from attnlens.pipeline.config import DataConfig, ModelConfig, SyntheticConfig, read_config_file, validate_config
from attnlens.stages.data import run_prepare_dataset
from tests.support.helpers import merged

TEXTS = [f"document number {i} about things" for i in range(12)]
MODEL = ModelConfig(max_length=32)


def _file_cfg(path, **kw):
    return DataConfig(source="file", path=str(path), **kw)


def _write_csv(tmp_path, df, name="d.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def _frame(n=12):
    return pd.DataFrame({"text": TEXTS[:n], "label": [i % 2 for i in range(n)]})


def test_stratified_split_is_seeded_and_balanced():
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    a = compute_split(labels, 0.2, 1)
    assert (a == compute_split(labels, 0.2, 1)).all()
    assert not (a == compute_split(labels, 0.2, 2)).all()
    assert [int(a[labels == c].sum()) for c in range(3)] == [10, 6, 4]


def test_synthetic_end_to_end(tmp_path):
    cfg = DataConfig(synthetic=SyntheticConfig(n_documents=20, min_words=30, max_words=60))
    paths = [tmp_path / n for n in ("train.parquet", "test.parquet", "rationales.parquet", "manifest.json")]
    run_prepare_dataset(cfg, MODEL, *paths)
    train, prov = load_examples(paths[0])
    test, _ = load_examples(paths[1])
    assert list(train.columns) == ["example_id", "text", "label"]
    assert len(train) == 16 and len(test) == 4
    assert prov["config"]["source"] == "synthetic" and prov["schema"] == "examples/v1"
    manifest = load_json(paths[3], "split_manifest/v1")
    by_id = {e["example_id"]: e for e in manifest["examples"]}
    for row in pd.concat([train, test]).itertuples():
        assert by_id[row.example_id]["sha256"] == sha256_text(row.text)
    rationales, _ = load_parquet(paths[2], "rationales/v1")
    assert set(rationales["example_id"]) <= set(by_id)
    # stable ids: a second run gives identical splits
    run_prepare_dataset(cfg, MODEL, *(tmp_path / f"b{p.name}" for p in paths))
    pd.testing.assert_frame_equal(train, load_examples(tmp_path / "btrain.parquet")[0])


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_file_formats(tmp_path, fmt):
    df = _frame().rename(columns={"text": "body", "label": "y"})
    path = tmp_path / f"d.{fmt}"
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path)
    frames, rationales, manifest = prepare_dataset(_file_cfg(path, text_column="body", label_column="y"))
    assert len(frames["train"]) + len(frames["test"]) == 12
    assert set(frames["test"]["label"]) == {0, 1}
    assert frames["train"]["example_id"].str.match(r"row\d{6}").all()
    assert rationales.empty and manifest["classes"] == ["0", "1"]


def test_file_own_split_and_id_column(tmp_path):
    df = _frame()
    df["split"] = ["test" if i < 4 else "train" for i in range(12)]
    df["uid"] = [f"u{i}" for i in range(12)]
    frames, _, _ = prepare_dataset(_file_cfg(_write_csv(tmp_path, df), id_column="uid"))
    assert list(frames["test"]["example_id"]) == ["u0", "u1", "u2", "u3"]


def test_folders_source(tmp_path):
    for name in ("cs.PL", "cs.AI"):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"p{i}.txt").write_text(f"{name} paper {i}", encoding="utf-8")
    frames, _, manifest = prepare_dataset(DataConfig(source="folders", path=str(tmp_path), classes=("cs.PL", "cs.AI")))
    both = pd.concat(frames.values())
    assert manifest["classes"] == ["cs.PL", "cs.AI"]
    assert dict(zip(both["example_id"], both["label"], strict=True))["cs.AI/p1"] == 1
    assert len(frames["test"]) == 2


# ------------------------------------------------------------------------------------------ bad input


def _raises(cfg, field, match):
    with pytest.raises(InputError) as err:
        prepare_dataset(cfg)
    assert err.value.field == field
    assert match in str(err.value)
    assert "\n" not in str(err.value)
    return err.value


def test_missing_text_or_label_column(tmp_path):
    path = _write_csv(tmp_path, _frame().rename(columns={"text": "txt"}))
    err = _raises(_file_cfg(path), "text", "expected a column 'text'")
    assert err.where == str(path)
    _raises(_file_cfg(_write_csv(tmp_path, _frame().drop(columns="label"), "e.csv")), "label", "column 'label'")


@pytest.mark.parametrize("bad", ["", "   \n\t"])
def test_empty_or_whitespace_text(tmp_path, bad):
    df = _frame()
    df.loc[3, "text"] = bad
    _raises(_file_cfg(_write_csv(tmp_path, df)), "text", "expected non-empty text, example 'row000003'")


def test_non_integer_labels(tmp_path):
    df = _frame().astype({"label": object})
    df.loc[2, "label"] = 0.5
    _raises(_file_cfg(_write_csv(tmp_path, df)), "label", "expected integer class labels")


def test_a_name_among_integer_labels_names_its_row(tmp_path):
    df = _frame().astype({"label": object})
    df.loc[2, "label"] = "positive"
    _raises(_file_cfg(_write_csv(tmp_path, df)), "label", "row 3 (example 'row000002') has 'positive' among integer")


def test_an_empty_label_cell_names_its_row(tmp_path):
    df = _frame().astype({"label": object})
    df.loc[4, "label"] = ""
    _raises(_file_cfg(_write_csv(tmp_path, df)), "label", "row 5 (example 'row000004') has an empty cell")


def test_class_names_as_labels_three_classes_one_rare(tmp_path):
    """String labels are class names: sorted when data.classes is absent, looked up when it is given."""
    names = ["spam"] * 2 + ["ham"] * 20 + ["eggs"] * 20  # a 1 : 10 imbalance
    df = pd.DataFrame({"text": [f"document number {i} about things" for i in range(len(names))], "label": names})
    path = _write_csv(tmp_path, df)
    frames, _, manifest = prepare_dataset(_file_cfg(path))
    assert manifest["classes"] == ["eggs", "ham", "spam"]
    assert manifest["counts"]["test"]["2"] == 1 and manifest["counts"]["train"]["2"] == 1
    frames, _, manifest = prepare_dataset(_file_cfg(path, classes=("ham", "spam", "eggs")))
    label_of = {r.example_id: r.label for f in frames.values() for r in f.itertuples()}
    assert [label_of[f"row{i:06d}"] for i in (0, 2, 22)] == [1, 0, 2]
    _raises(_file_cfg(path, classes=("ham", "spam")), "label", "row 23 (example 'row000022') has 'eggs'")


@pytest.mark.parametrize("escape", ["class", "file"])
def test_a_path_outside_data_path_is_refused(tmp_path, escape):
    root, outside = tmp_path / "data", tmp_path / "outside"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            (root / name / f"{i}.txt").write_text(f"text {i} of {name}")
    outside.mkdir()
    (outside / "secret.txt").write_text("not data")
    classes = ("a", "b")
    if escape == "class":
        classes = ("a", "../outside")
    else:
        (root / "b" / "link.txt").symlink_to(outside / "secret.txt")
    err = _raises(
        DataConfig(source="folders", path=str(root), classes=classes),
        "data.classes[1]",
        "expected a path inside data.path",
    )
    assert "outside" in err.expected


def test_class_absent_from_training(tmp_path):
    df = _frame()
    df["split"] = ["test" if y == 1 else "train" for y in df["label"]]
    _raises(_file_cfg(_write_csv(tmp_path, df)), "label", "class 1 is absent")


def test_labels_outside_declared_classes(tmp_path):
    df = _frame()
    df.loc[0, "label"] = 5
    _raises(_file_cfg(_write_csv(tmp_path, df), classes=("a", "b")), "label", "expected labels 0..1, got 5")


def test_single_class(tmp_path):
    df = _frame()
    df["label"] = 0
    _raises(_file_cfg(_write_csv(tmp_path, df)), "label", "at least two classes")


def test_duplicate_ids(tmp_path):
    df = _frame()
    df["uid"] = ["a"] * 12
    _raises(_file_cfg(_write_csv(tmp_path, df), id_column="uid"), "example_id", "'a' occurs more than once")


def test_non_utf8_file(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes("text,label\ncaf\xe9 au lait,0\nthe,1\n".encode("latin-1"))
    err = _raises(_file_cfg(path), "(encoding)", "expected UTF-8")
    assert err.where == str(path)


def test_non_utf8_txt_in_folders(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.txt").write_text("fine text", encoding="utf-8")
        (tmp_path / name / "y.txt").write_text("fine text", encoding="utf-8")
    (tmp_path / "b" / "bad.txt").write_bytes(b"na\xefve")
    err = _raises(DataConfig(source="folders", path=str(tmp_path), classes=("a", "b")), "(encoding)", "UTF-8")
    assert err.where.endswith("b/bad.txt")


def test_empty_txt_file_in_folders(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.txt").write_text("fine text", encoding="utf-8")
        (tmp_path / name / "y.txt").write_text("more text", encoding="utf-8")
    (tmp_path / "a" / "blank.txt").write_text("  \n", encoding="utf-8")
    err = _raises(DataConfig(source="folders", path=str(tmp_path), classes=("a", "b")), "text", "non-empty")
    assert err.where.endswith("a/blank.txt")


def test_empty_folder_class(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.txt").write_text("text", encoding="utf-8")
    err = _raises(DataConfig(source="folders", path=str(tmp_path), classes=("a", "b")), "data.classes[1]", "none")
    assert err.where.endswith("/b")


def test_hub_offline_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = DataConfig.from_dict({"source": "hub", "hub": {"name": "danielhou13/cogs402dataset"}})
    _raises(cfg, "data.hub.name", "could not load 'danielhou13/cogs402dataset'")


def test_manifest_is_json_serialisable(tmp_path):
    _, _, manifest = prepare_dataset(_file_cfg(_write_csv(tmp_path, _frame())))
    json.dumps(manifest)
    assert manifest["counts"]["test"] == {"0": 1, "1": 1}


def test_truncation_is_counted_in_the_manifest(tmp_path):
    """Documents longer than model.max_length are cut by every later stage: the manifest says by how much."""
    texts = ["word " * 100, "short text", *TEXTS[2:]]
    path = _write_csv(
        tmp_path,
        pd.DataFrame({"text": texts, "label": [i % 2 for i in range(12)], "split": ["test"] * 2 + ["train"] * 10}),
    )
    paths = [tmp_path / n for n in ("train.parquet", "test.parquet", "rationales.parquet", "manifest.json")]
    run_prepare_dataset(_file_cfg(path), MODEL, *paths)
    manifest = load_json(paths[3], "split_manifest/v1")
    long, short = manifest["examples"][-2:]
    assert (long["tokens"], long["kept"]) == (102, 32)  # [CLS] 100 × word [SEP]
    assert short["tokens"] == short["kept"] == 4
    assert manifest["truncation"]["test"] == {
        "documents": 2,
        "truncated": 1,
        "tokens": 106,
        "tokens_kept": 36,
        "longest": 102,
    }
    assert manifest["truncation"]["train"]["truncated"] == 0
    assert manifest["provenance"]["notes"][0] == (
        "test: 1 of 2 documents are longer than max_length 32 and were cut (longest 102 tokens); "
        "36 of 106 tokens kept (34%)"
    )
    # then the unknown-token share of each split, counted on what the model sees (30 words of the long one)
    assert manifest["unknown_tokens"]["test"] == {"unknown": 0, "content": 32, "share": 0.0}
    assert manifest["provenance"]["notes"][1:] == [
        f"{s}: 0 of {manifest['unknown_tokens'][s]['content']} content tokens are [UNK] (0.00%); they are attributed "
        "and ranked as text"
        for s in ("train", "test")
    ]


def test_a_dataset_is_named_by_its_source(tmp_path):
    path = _write_csv(tmp_path, _frame(), name="discharge notes.csv")
    assert prepare_dataset(_file_cfg(path))[2]["name"] == "discharge notes"
    for c, name in enumerate(("cs.PL", "cs.AI")):
        (tmp_path / "arxiv" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "arxiv" / name / f"p{i}.txt").write_text(f"paper {i} of class {c}", encoding="utf-8")
    cfg = DataConfig(source="folders", path=str(tmp_path / "arxiv"), classes=("cs.PL", "cs.AI"))
    assert prepare_dataset(cfg)[2]["name"] == "arxiv"
    assert prepare_dataset(DataConfig(synthetic=SyntheticConfig(n_documents=8)))[2]["name"] == "synthetic papers"


def test_byte_order_marks_and_windows_line_ends_are_read_as_text(tmp_path):
    csv = tmp_path / "bom.csv"
    csv.write_bytes('\ufefftext,label\r\n"first\r\nnote",0\r\nsecond,1\r\nthird,0\r\nfourth,1\r\n'.encode())
    frames, _, _ = prepare_dataset(_file_cfg(csv, test_fraction=0.5))
    texts = sorted(pd.concat(frames.values())["text"])
    assert texts == ["first\r\nnote", "fourth", "second", "third"]
    for name in ("a", "b"):
        (tmp_path / "f" / name).mkdir(parents=True)
        for i in range(2):
            (tmp_path / "f" / name / f"x {i}__y.txt").write_text(f"doc {i}", encoding="utf-8-sig")
    frames, _, _ = prepare_dataset(DataConfig(source="folders", path=str(tmp_path / "f"), classes=("a", "b")))
    both = pd.concat(frames.values())
    assert not both["text"].str.startswith("\ufeff").any()
    assert sorted(both["example_id"]) == ["a/x 0__y", "a/x 1__y", "b/x 0__y", "b/x 1__y"]


def test_one_document_is_read_and_noted_as_a_split_is():
    """attnlens.explain's report of a document: the split manifest's numbers and the run notes' lines."""
    from transformers import AutoTokenizer  # noqa: PLC0415 (the packaged tokenizer, for this test only)

    from attnlens.models.checkpoints import packaged_model_dir  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    reading, notes = document_reading(tokenizer, "a short note on the ward", 16, "doc")
    assert reading == {"tokens": 8, "kept": 8, "truncated": False, "unknown": 0, "content": 6, "unknown_share": 0.0}
    assert notes == []
    reading, notes = document_reading(tokenizer, "word " * 40, 16, "doc")  # 40 words + [CLS] [SEP]
    assert (reading["tokens"], reading["kept"], reading["truncated"]) == (42, 16, True)
    assert notes == [
        "doc: 1 of 1 documents are longer than max_length 16 and were cut (longest 42 tokens); "
        "16 of 42 tokens kept (38%)"
    ]
    reading, notes = document_reading(tokenizer, "患者入院 🙂 fever", 64, "doc")  # Chinese and emoji: [UNK] to MiniLM
    assert reading["unknown"] > 0 and reading["unknown_share"] > 0.01
    assert len(notes) == 1 and notes[0].startswith("warning: doc: ") and "[UNK]" in notes[0]


def test_a_document_given_as_paragraphs_is_one_text(tmp_path):
    """A JSONL list of paragraphs (ECtHR's facts, a note's sections) is the paragraphs joined by a blank line."""
    rows = [
        {"text": [f"Paragraph one of {i}.", f"Paragraph two of {i}."] if i % 2 else f"plain text {i}", "label": i % 2}
        for i in range(12)
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    frames, _, _ = prepare_dataset(_file_cfg(path))
    texts = set(pd.concat(frames.values())["text"])
    assert "Paragraph one of 1.\n\nParagraph two of 1." in texts and "plain text 0" in texts
    rows[3]["text"] = []  # no paragraph: an empty document, refused in one line
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _raises(_file_cfg(path), "text", "is empty or whitespace")


def _ecthr_overlay(root) -> dict:
    """config/ecthr.yaml laid over config/config.yaml and validated, as ``--configfile`` gives it to the rules."""
    config = merged(read_config_file(root / "config/config.yaml"), read_config_file(root / "config/ecthr.yaml"))
    return validate_config(config, "config/ecthr.yaml")


def test_the_ecthr_overlay_reads_a_hub_dataset_of_its_shape(root, tmp_path):
    """config/ecthr.yaml on a local dataset of ECtHR's shape (a list of fact paragraphs, a list of violated article
    indices; Hugging Face's loader reads a folder of parquet files as it reads the hub's conversion): the cases are
    texts, the labels multi-hot over the ten articles in the dataset's order, the splits its own, sliced."""
    config = _ecthr_overlay(root)
    assert config["data"]["task"] == "multilabel" and len(config["data"]["classes"]) == 10
    for split, n in (("train", 10), ("test", 6)):
        labels = [sorted({i % 10, (i + 5) % 10}) for i in range(n)]  # the first 8 cases hold every article
        labels[0], labels[-1] = [0, 9], []  # article_2 and article_P1-1; a case that violates none
        facts = [[f"{k}. The applicant in {split} case {i} stated fact {k}." for k in range(1, 4)] for i in range(n)]
        pd.DataFrame({"text": facts, "labels": labels}).to_parquet(tmp_path / f"{split}.parquet")
    data = {
        **config["data"],
        "hub": {
            **config["data"]["hub"],
            "name": str(tmp_path),
            "config": None,
            "train_split": "train[:8]",
            "test_split": "test[:5]",
        },
    }
    frames, _, manifest = prepare_dataset(DataConfig.from_dict(data))
    assert (len(frames["train"]), len(frames["test"])) == (8, 5)
    assert manifest["classes"] == config["data"]["classes"] and manifest["task"] == "multilabel"
    first = frames["train"].set_index("example_id").loc["train[:8]-000000"]  # ids: the split as asked, the row
    assert first["text"].split("\n\n") == [f"{k}. The applicant in train case 0 stated fact {k}." for k in (1, 2, 3)]
    assert np.flatnonzero(first["label"]).tolist() == [0, 9]  # article_2 and article_P1-1


def test_the_ecthr_overlay_offline_is_one_line(root, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = DataConfig.from_dict(_ecthr_overlay(root)["data"])
    _raises(cfg, "data.hub.name", "could not load 'coastalcph/lex_glue' split 'train[:1000]'")
