"""Dataset layouts (attnlens.data.layouts): HotpotQA's rows as question-answering examples with their supporting facts
as rationales, from a file in the original JSON form and from a hub dataset of Hugging Face's form."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnlens.data.layouts import REGISTRY, Columns, get_layout, left_out_note
from attnlens.data.sources import prepare_dataset
from attnlens.errors import InputError
from attnlens.io import load_json, load_parquet
from attnlens.pipeline.config import (
    DataConfig,
    ModelConfig,
    load_schema,
    read_config_file,
    rule_section,
    validate_config,
)
from attnlens.pipeline.config.shared_keys import PREPARE_DATASET_KEYS
from attnlens.stages.data import run_prepare_dataset
from attnlens.tasks.qa import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING
from attnlens.tasks.squad import check_answers
from tests.support.helpers import merged

HOTPOT = get_layout("hotpot_qa")
COLUMNS = Columns(text="context", label="answers", question="question")


def _hotpot_row(i: int, split: str = "train") -> dict:
    """One HotpotQA row in the original JSON form: two supporting paragraphs and two distractors, the answer also
    written (earlier) in a distractor, so only the supporting fact places it; every fifth question answered yes."""
    answer = f"Lake {split.title()} {i}"
    context = [
        [f"Distractor {i}a", [f"{answer} is named in a distractor first.", " It has nothing to do with the question."]],
        [f"Bridge {i}", [f"Bridge {i} is a town in the hills.", f" Its mayor once swam across {answer}."]],
        [f"Distractor {i}b", ["An unrelated sentence.", " Another one.", " A third."]],
        [f"Town {i}", [f"Town {i} was founded in 18{i:02d}.", " It is twinned with Bridge."]],
    ]
    return {
        "_id": f"{split}{i:03d}",
        "question": f"Which lake did the mayor of the town twinned with Town {i} swim across?",
        "answer": "yes" if i % 5 == 4 else answer,
        "type": "bridge",
        "level": "medium",
        "supporting_facts": [[f"Town {i}", 1], [f"Bridge {i}", 1]],
        "context": context,
    }


def _hugging_face_form(row: dict) -> dict:
    """The same row as Hugging Face's ``hotpotqa/hotpot_qa`` gives it: the lists of pairs as dicts of lists."""
    return {
        **{k: v for k, v in row.items() if k not in ("_id", "context", "supporting_facts")},
        "id": row["_id"],
        "supporting_facts": {
            "title": [t for t, _ in row["supporting_facts"]],
            "sent_id": [k for _, k in row["supporting_facts"]],
        },
        "context": {"title": [t for t, _ in row["context"]], "sentences": [s for _, s in row["context"]]},
    }


def test_layouts_are_a_registry_the_schema_reads():
    prop = load_schema()["properties"]["data"]["properties"]["layout"]
    assert prop["enum"] == list(REGISTRY) and prop["default"] == "columns"


def test_a_hotpot_row_becomes_a_context_an_answer_in_its_supporting_fact_and_rationales():
    row = _hotpot_row(3)
    laid = HOTPOT.lay_out(pd.DataFrame([row]), COLUMNS, "hotpot.json")
    text = laid.frame["context"].iloc[0]
    # the ten (here four) paragraphs: a title line, the sentences as the dataset splits them, a blank line between
    assert (
        text.split("\n\n")[1] == "Bridge 3\nBridge 3 is a town in the hills. Its mayor once swam across Lake Train 3."
    )
    answers = laid.frame["answers"].iloc[0]
    start = answers["answer_start"][0]
    assert text[start : start + len(answers["text"][0])] == "Lake Train 3"
    assert start > text.index("Bridge 3\n")  # in the supporting fact, not at its first occurrence (a distractor's)
    check_answers(laid.frame["question"], laid.frame["context"], laid.frame["answers"], ["x"], "hotpot.json")
    by_kind = {
        kind: [r for r in laid.rationales if r["phrase_label"] == kind]
        for kind in (QA_ANSWER, QA_SUPPORTING, QA_DISTRACTOR)
    }
    assert [r["phrase"] for r in by_kind[QA_ANSWER]] == [" Its mayor once swam across Lake Train 3."]
    assert [r["phrase"] for r in by_kind[QA_SUPPORTING]] == [" It is twinned with Bridge."]
    assert len(by_kind[QA_DISTRACTOR]) == 5  # every sentence of the two distractor paragraphs
    for r in laid.rationales:
        assert text[r["char_start"] : r["char_end"]] == r["phrase"] and r["evidence"] == (r["phrase_label"] != 2)
        assert r["row"] == 0
    assert laid.left_out == {}


def test_the_original_json_and_hugging_faces_form_lay_out_the_same_examples(tmp_path):
    rows = [_hotpot_row(i) for i in range(6)]
    original = HOTPOT.lay_out(pd.DataFrame(rows), COLUMNS, "f")
    # Hugging Face's form, as a parquet round trip gives it to pandas (NumPy arrays in dicts)
    pd.DataFrame([_hugging_face_form(r) for r in rows]).to_parquet(tmp_path / "hf.parquet")
    hf = pd.read_parquet(tmp_path / "hf.parquet")
    assert type(hf["context"].iloc[0]["sentences"]).__name__ == "ndarray"
    hf = HOTPOT.lay_out(hf, COLUMNS, "hub")
    assert original.frame["context"].tolist() == hf.frame["context"].tolist()
    assert original.frame["answers"].tolist() == hf.frame["answers"].tolist()
    assert original.rationales == hf.rationales
    assert original.frame.index.tolist() == [0, 1, 2, 3, 5]  # the source's rows kept; row 4 is answered yes
    assert original.left_out == {"questions answered yes or no (no span to extract)": 1}


def test_what_a_hotpot_row_cannot_give_is_counted_or_refused_in_one_line():
    missing = {**_hotpot_row(0), "answer": "Nowhere at all"}  # not in its context: left out, counted
    bad_fact = {**_hotpot_row(1), "supporting_facts": [["Town 1", 1], ["Bridge 1", 7]]}  # no 8th sentence
    laid = HOTPOT.lay_out(pd.DataFrame([missing, bad_fact]), COLUMNS, "f")
    assert laid.frame.index.tolist() == [1]
    assert laid.left_out == {
        "answers their context does not contain": 1,
        "supporting facts naming a sentence their paragraph does not have (the fact dropped)": 1,
    }
    # the answer is then found in the context at large (the distractor's mention), never made up
    start = laid.frame["answers"].iloc[0]["answer_start"][0]
    assert start == laid.frame["context"].iloc[0].index("Lake Train 1")
    assert not [r for r in laid.rationales if r["phrase_label"] == QA_ANSWER]
    note = left_out_note("hotpot.json", laid.left_out, "hotpot_qa")
    assert note.startswith("hotpot.json (data.layout hotpot_qa): 1 answers their context does not contain; 1 ")
    assert left_out_note("f", {}, "hotpot_qa") is None
    with pytest.raises(InputError, match=r"^f: context: expected HotpotQA's paragraphs .* row 1 has 'a plain"):
        HOTPOT.lay_out(pd.DataFrame([{**_hotpot_row(0), "context": "a plain string"}]), COLUMNS, "f")
    with pytest.raises(InputError, match=r"^f: supporting_facts: expected HotpotQA's column 'supporting_facts'"):
        HOTPOT.lay_out(pd.DataFrame([_hotpot_row(0)]).drop(columns="supporting_facts"), COLUMNS, "f")


def _file_cfg(path, studies=("classification",), model=None, **data) -> DataConfig:
    config = {
        "data": {
            "task": "qa",
            "source": "file",
            "path": str(path),
            "layout": "hotpot_qa",
            "text_column": "context",
            "label_column": "answers",
            "id_column": "_id",
            **data,
        },
        "studies": list(studies),
        **({"model": model} if model else {}),
    }
    return DataConfig.from_dict(validate_config(config)["data"])


def test_a_hotpot_json_file_gives_question_answering_splits_with_rationales(tmp_path):
    """HotpotQA's own distribution (one JSON array, hotpot_dev_distractor_v1.json) read offline as a file."""
    rows = [_hotpot_row(i) for i in range(20)]
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    frames, rationales, manifest = prepare_dataset(_file_cfg(path))
    both = pd.concat(frames.values())
    assert len(both) == 16 and set(both["example_id"]) == {r["_id"] for r in rows if r["answer"] != "yes"}
    assert manifest["left_out"] == {"questions answered yes or no (no span to extract)": 4}
    assert set(rationales["example_id"]) == set(both["example_id"])
    texts = both.set_index("example_id")["text"]
    for r in rationales.itertuples():
        assert texts[r.example_id][r.char_start : r.char_end] == r.phrase
    assert rationales.groupby("example_id")["phrase_label"].apply(sorted).map(tuple).unique().tolist() == [
        (QA_ANSWER, QA_SUPPORTING, *[QA_DISTRACTOR] * 5)
    ]


def test_rule_prepare_dataset_is_given_every_key_a_hotpot_file_reads(tmp_path):
    """The rule's own keys (PREPARE_DATASET_KEYS, strict: a key it reads but is not given fails), on a HotpotQA
    file; the questions left out are a run note."""
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([_hotpot_row(i) for i in range(10)]), encoding="utf-8")
    config = _file_cfg(path, question_column="question").to_dict()
    given = {key: config[key] for key in PREPARE_DATASET_KEYS["data"]}
    paths = [tmp_path / n for n in ("train.parquet", "test.parquet", "rationales.parquet", "manifest.json")]
    model = ModelConfig(max_length=64).to_dict()
    run_prepare_dataset(
        rule_section({"data": given}, "data"),
        rule_section({"model": {k: model[k] for k in PREPARE_DATASET_KEYS["model"]}}, "model"),
        *paths,
    )
    notes = load_json(paths[3], "split_manifest/v1")["provenance"]["notes"]
    assert f"{path} (data.layout hotpot_qa): 2 questions answered yes or no (no span to extract)" in notes
    assert len(load_parquet(paths[2], "rationales/v1")[0]) == 8 * 7


def test_a_layout_is_refused_where_it_cannot_mean_anything(tmp_path):
    for data, match in (
        (
            {"task": "qa", "source": "synthetic", "layout": "hotpot_qa"},
            "expected 'columns' for data.source 'synthetic'",
        ),
        (
            {"task": "classification", "source": "file", "path": "x.json", "layout": "hotpot_qa"},
            "expected data.task one of \\['qa', 'generation'\\] for data.layout 'hotpot_qa', got 'classification'",
        ),
    ):
        with pytest.raises(InputError, match=f"^config: data.layout: {match}"):
            validate_config({"data": data, "studies": ["classification"]})


def _hotpot_overlay(root) -> dict:
    """config/hotpotqa.yaml laid over config/config.yaml and validated, as ``--configfile`` gives it to the rules."""
    config = merged(read_config_file(root / "config/config.yaml"), read_config_file(root / "config/hotpotqa.yaml"))
    return validate_config(config, "config/hotpotqa.yaml")


def test_the_hotpot_overlay_reads_a_hub_dataset_of_its_shape(root, tmp_path):
    """config/hotpotqa.yaml on a local dataset of Hugging Face's HotpotQA shape (Hugging Face's loader reads a folder
    of parquet files as it reads the hub's conversion): its own splits, sliced, its ids, its supporting facts."""
    config = _hotpot_overlay(root)
    assert config["data"]["layout"] == "hotpot_qa" and config["data"]["hub"]["config"] == "distractor"
    for split, n in (("train", 12), ("validation", 6)):
        pd.DataFrame([_hugging_face_form(_hotpot_row(i, split)) for i in range(n)]).to_parquet(
            tmp_path / f"{split}.parquet"
        )
    data = {
        **config["data"],
        "hub": {
            **config["data"]["hub"],
            "name": str(tmp_path),
            "config": None,
            "train_split": "train[:10]",
            "test_split": "validation[:5]",
        },
    }
    frames, rationales, manifest = prepare_dataset(DataConfig.from_dict(data))
    assert (len(frames["train"]), len(frames["test"])) == (8, 4)  # rows 4 and 9 of train, 4 of validation: yes
    assert manifest["left_out"] == {"questions answered yes or no (no span to extract)": 3}
    first = frames["test"].set_index("example_id").loc["validation000"]
    assert first["question"].startswith("Which lake") and list(first["label"]) == [
        {"text": "Lake Validation 0", "answer_start": first["text"].index("swam across ") + 12}
    ]
    assert len(rationales) == 12 * 7


def test_the_hotpot_overlay_offline_is_one_line(root, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = DataConfig.from_dict(_hotpot_overlay(root)["data"])
    with pytest.raises(
        InputError,
        match=r"^config: data.hub.name: could not load 'hotpotqa/hotpot_qa' split "
        r"'train\[:2000\]'",
    ):
        prepare_dataset(cfg)


def test_a_hotpot_file_as_generation_gives_answers_paragraph_sources_and_supporting_facts(tmp_path):
    """``data.task: generation`` on HotpotQA: the answer's text is the label (yes and no kept: a generated answer
    needs no span), each titled paragraph a source of ``data.sources_column`` (spans of the context, in order), the
    supporting facts the evidence the generation study scores against."""
    rows = [_hotpot_row(i) for i in range(10)]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    frames, rationales, manifest = prepare_dataset(
        _file_cfg(
            path,
            ["generation"],
            {"source": "from_config", "architecture": "llama"},
            task="generation",
            label_column="answer",
            question_column="question",
            sources_column="paras",
        )
    )
    both = pd.concat(frames.values()).set_index("example_id")
    assert (len(both) == 10 and "left_out" not in manifest) or not manifest.get("left_out")
    assert both.loc["train004", "label"] == "yes" and both.loc["train003", "label"] == "Lake Train 3"
    for example_id, row in both.iterrows():
        paragraphs = list(row["sources"])
        assert len(paragraphs) == 4 and paragraphs[1].startswith(f"Bridge {example_id[-1]}\n")
        assert [row["text"].index(p) for p in paragraphs] == sorted(row["text"].index(p) for p in paragraphs)
    evidence = rationales[rationales["evidence"]]
    assert len(evidence) == 2 * 10 and set(evidence["phrase_label"]) <= {QA_ANSWER, QA_SUPPORTING}


def _rag_overlay(root) -> dict:
    """config/hotpotqa_rag.yaml laid over config/config.yaml and validated."""
    config = merged(read_config_file(root / "config/config.yaml"), read_config_file(root / "config/hotpotqa_rag.yaml"))
    return validate_config(config, "config/hotpotqa_rag.yaml")


def test_the_rag_recipe_reads_a_hub_dataset_of_its_shape_and_offline_is_one_line(root, tmp_path, monkeypatch):
    """config/hotpotqa_rag.yaml on a local dataset of Hugging Face's HotpotQA shape: questions, answers, the ten
    (here four) titled paragraphs as sources; offline, its hub dataset is one line naming data.hub.name."""
    config = _rag_overlay(root)
    assert config["studies"] == ["generation"] and config["model"]["source"] == "pretrained"
    pd.DataFrame([_hugging_face_form(_hotpot_row(i, "validation")) for i in range(6)]).to_parquet(
        tmp_path / "validation.parquet"
    )
    pd.DataFrame([_hugging_face_form(_hotpot_row(i)) for i in range(12)]).to_parquet(tmp_path / "train.parquet")
    hub = {**config["data"]["hub"], "name": str(tmp_path), "config": None}
    frames, _, _ = prepare_dataset(DataConfig.from_dict({**config["data"], "hub": hub}))
    assert (len(frames["train"]), len(frames["test"])) == (12, 6)
    assert all(len(s) == 4 for s in frames["test"]["sources"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(InputError, match=r"^config: data.hub.name: could not load 'hotpotqa/hotpot_qa'"):
        prepare_dataset(DataConfig.from_dict(config["data"]))
