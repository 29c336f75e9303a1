import json
import os
import subprocess

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from attnlens.errors import InputError
from attnlens.io import (
    atomic_dir,
    atomic_path,
    load_json,
    load_parquet,
    load_shards,
    load_tensors,
    pack_strings,
    provenance,
    save_json,
    save_parquet,
    save_tensors,
    unpack_strings,
)


def test_parquet_round_trip_with_provenance(tmp_path):
    df = pd.DataFrame({"example_id": ["a", "b"], "scores": [[0.1, 0.2], [0.3]], "label": [0, 1]})
    prov = provenance("toy/v1", {"k": 1}, seed=3)
    save_parquet(df, tmp_path / "x.parquet", prov)
    back, got = load_parquet(tmp_path / "x.parquet", "toy/v1")
    assert back["example_id"].tolist() == ["a", "b"] and list(back["scores"][0]) == [0.1, 0.2]
    assert got["config"] == {"k": 1} and got["seed"] == 3 and got["attnlens_version"]
    with pytest.raises(InputError, match="expected 'other/v1'"):
        load_parquet(tmp_path / "x.parquet", "other/v1")


def test_tensors_and_json_round_trip(tmp_path):
    t = {"importance": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    save_tensors(t, tmp_path / "t.safetensors", provenance("t/v1"))
    back, prov = load_tensors(tmp_path / "t.safetensors", "t/v1")
    assert torch.equal(back["importance"], t["importance"]) and prov["schema"] == "t/v1"  # a file round trip: bits
    save_json({"a": [1, 2]}, tmp_path / "m.json", provenance("m/v1"))
    assert load_json(tmp_path / "m.json", "m/v1")["a"] == [1, 2]


def test_atomic_path_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "out" / "f.json"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_atomic_path_keeps_old_file_until_success(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(ValueError), atomic_path(target) as tmp:
        tmp.write_text("new")
        raise ValueError
    assert target.read_text() == "old"
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"


def test_atomic_dir(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(KeyError), atomic_dir(target) as tmp:
        (tmp / "weights").write_text("x")
        raise KeyError
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_dir(target) as tmp:
        (tmp / "weights").write_text("x")
    assert (target / "weights").read_text() == "x"


def test_json_artifact_has_provenance_first(tmp_path):
    save_json({"x": 1}, tmp_path / "a.json", provenance("a/v1", seed=1))
    assert next(iter(json.loads((tmp_path / "a.json").read_text()))) == "provenance"


def test_temporaries_of_killed_writers_are_removed(tmp_path):
    """A writer killed mid-write leaves ``.<name>.tmp-<pid>``; the next write removes it, not a live writer's."""

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale_file = tmp_path / f".table.tmp-{dead.pid}.csv"
    stale_dir = tmp_path / f".model.tmp-{dead.pid}"
    live = tmp_path / f".table.tmp-{os.getppid()}.csv"
    for p in (stale_file, live):
        p.write_text("half")
    stale_dir.mkdir()
    (stale_dir / "weights").write_text("half")
    with atomic_path(tmp_path / "table.csv") as tmp:
        tmp.write_text("whole")
    with atomic_dir(tmp_path / "model") as tmp:
        (tmp / "weights").write_text("whole")
    assert not stale_file.exists() and not stale_dir.exists() and live.exists()
    assert (tmp_path / "table.csv").read_text() == "whole" and (tmp_path / "model/weights").read_text() == "whole"


def test_strings_round_trip_through_tensors(tmp_path):
    ids = ["doc|1", "é-ü", "", "a" * 300]
    data, offsets = pack_strings(ids)
    assert data.dtype == torch.uint8 and offsets.tolist()[0] == 0 and offsets.tolist()[-1] == len(data)
    save_tensors({"b": data, "o": offsets}, tmp_path / "s.safetensors", provenance("strings/v1"))
    back, _ = load_tensors(tmp_path / "s.safetensors")
    assert unpack_strings(back["b"], back["o"]) == ids
    assert unpack_strings(*pack_strings([])) == []


def test_an_empty_shard_is_a_typed_artifact_and_readers_concatenate_it(tmp_path):
    """More shards than examples: an empty shard has every column with its type, and adds nothing."""
    columns = pa.schema([("example_id", pa.string()), ("value", pa.float64()), ("ids", pa.list_(pa.int32()))])
    full = pd.DataFrame({"example_id": ["a", "b"], "value": [0.5, 1.5], "ids": [np.array([1, 2]), np.array([3])]})
    save_parquet(full, tmp_path / "shard0.parquet", provenance("x/v1"), columns)
    save_parquet(pd.DataFrame(), tmp_path / "shard1.parquet", provenance("x/v1"), columns)
    assert pq.read_schema(tmp_path / "shard1.parquet").remove_metadata() == columns
    assert pq.read_schema(tmp_path / "shard0.parquet").remove_metadata() == columns
    both = load_shards([tmp_path / "shard1.parquet", tmp_path / "shard0.parquet"], "x/v1", columns)
    assert both["value"].dtype == np.float64 and both["example_id"].tolist() == ["a", "b"]
    empty = load_shards([tmp_path / "shard1.parquet"], "x/v1", columns)
    assert list(empty.columns) == ["example_id", "value", "ids"] and empty["value"].dtype == np.float64
    save_parquet(pd.DataFrame({"example_id": ["c"]}), tmp_path / "old.parquet", provenance("x/v1"))
    with pytest.raises(InputError, match=r"old.parquet: columns: expected the columns \['value', 'ids'\] of x/v1"):
        load_shards([tmp_path / "old.parquet"], "x/v1", columns)
    with pytest.raises(ValueError, match="lacks the artifact's columns"):
        save_parquet(pd.DataFrame({"example_id": ["c"]}), tmp_path / "bad.parquet", provenance("x/v1"), columns)
    assert not (tmp_path / "bad.parquet").exists()
