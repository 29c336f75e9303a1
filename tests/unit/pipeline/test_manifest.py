"""results/manifest.json from job records; provenance read back from every kind of artifact."""

import hashlib
import json
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch

from attnlens.io import Job, config_sha256, provenance, save_csv, save_json, save_parquet, save_tensors, set_job
from attnlens.pipeline.manifest import build_manifest, read_provenance, sha256_tree
from attnlens.pipeline.runtime import job_record_path, write_job_record
from attnlens.render.figures import save_figure
from attnlens.render.tables import write_table


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_tree_hash_covers_names_and_contents(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_bytes(b"A")
    (d / "sub" / "b.txt").write_bytes(b"B")
    (d / ".snakemake_timestamp").write_bytes(b"")
    digest, files = sha256_tree(d)
    lines = f"a.txt\0{_sha(b'A')}\nsub/b.txt\0{_sha(b'B')}\n"
    assert digest == _sha(lines.encode())
    assert [f["path"] for f in files] == ["a.txt", "sub/b.txt"]
    (d / "sub" / "b.txt").write_bytes(b"C")
    assert sha256_tree(d)[0] != digest
    (d / "sub" / "b.txt").write_bytes(b"B")
    (d / "sub" / "b.txt").rename(d / "sub" / "c.txt")
    assert sha256_tree(d)[0] != digest  # a rename changes the hash too


def test_manifest_follows_records_from_the_targets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("data")
    os.makedirs("results/logs/a")
    os.makedirs("results/logs/b")
    Path("data/user.csv").write_text("x\n1\n")  # a source no rule made
    Path("results/mid.txt").write_text("mid")
    write_job_record("a", ["data/user.csv"], ["results/mid.txt"], "results/logs/a/a.log")
    os.makedirs("results/out")
    Path("results/out/f1.txt").write_text("f1")
    write_job_record(
        "b", ["results/mid.txt"], ["results/out", "results/final.txt"], "results/logs/b/b.log", {"shard": "0"}
    )
    Path("results/final.txt").write_text("final")
    # a stale record: its output is gone, and one the targets do not reach
    write_job_record("gone", ["results/mid.txt"], ["results/vanished.txt"], "results/logs/a/gone.log")
    Path("results/unused.txt").write_text("u")
    write_job_record("unused", [], ["results/unused.txt"], "results/logs/a/unused.log")
    entries = {e["path"]: e for e in build_manifest(["results/out", "results/final.txt"], "results/logs")}
    assert set(entries) == {"results/out", "results/final.txt", "results/mid.txt", "data/user.csv"}
    assert entries["results/final.txt"]["rule"] == "b" and entries["results/final.txt"]["wildcards"] == {"shard": "0"}
    assert entries["results/out"]["kind"] == "directory"
    assert entries["results/out"]["files"] == [{"path": "f1.txt", "sha256": _sha(b"f1"), "bytes": 2}]
    assert entries["results/final.txt"]["inputs"] == [{"path": "results/mid.txt", "sha256": _sha(b"mid")}]
    assert entries["results/mid.txt"]["inputs"] == [{"path": "data/user.csv", "sha256": _sha(b"x\n1\n")}]
    assert entries["data/user.csv"]["rule"] is None and entries["data/user.csv"]["inputs"] == []
    assert entries["results/mid.txt"]["job_record"] == job_record_path("results/logs/a/a.log").as_posix()
    # a file inside an output folder resolves to the folder's job
    inner = {e["path"]: e for e in build_manifest(["results/out/f1.txt"], "results/logs")}
    assert inner["results/out"]["rule"] == "b"
    # the newest record of an output wins (a re-run under another rule name, say)
    time.sleep(0.01)
    write_job_record("a2", ["data/user.csv"], ["results/mid.txt"], "results/logs/a/a2.log")
    os.utime(job_record_path("results/logs/a/a2.log"), (time.time() + 5, time.time() + 5))
    again = {e["path"]: e for e in build_manifest(["results/final.txt"], "results/logs")}
    assert again["results/mid.txt"]["rule"] == "a2"


JOB = Job("rule_x", {"seed": 5, "k": "x (y) \\ z é"}, 5, "runhash")


def _figure(path) -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label="a (b) \\ c")
    ax.set_title("parentheses ( and backslashes \\ survive")
    save_figure(fig, path)


def test_every_writer_leaves_readable_provenance(tmp_path):
    set_job(JOB)
    try:
        _figure(tmp_path / "fig")
        write_table(pd.DataFrame({"a": [1, 2]}), tmp_path / "table", "caption")
        save_csv(pd.DataFrame({"a": [1]}), tmp_path / "plain.csv")
        prov = provenance("thing/v1", {"seed": 5}, 5)
        save_parquet(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet", prov)
        save_json({"x": 1}, tmp_path / "t.json", prov)
        save_tensors({"w": torch.zeros(2)}, tmp_path / "t.safetensors", prov)
    finally:
        set_job(None)
    names = [
        "fig.png",
        "fig.pdf",
        "table.csv",
        "table.tex",
        "table.md",
        "plain.csv",
        "t.parquet",
        "t.json",
        "t.safetensors",
    ]
    for name in names:
        found = read_provenance(tmp_path / name)
        assert found is not None, name
        assert found["seed"] == 5 and found["run_config_sha256"] == "runhash", name
        assert found["config_sha256"] and found["git_commit"] and found["attnlens_version"], name
        assert found["rule"] == "rule_x", name
    side = json.loads((tmp_path / "table.provenance.json").read_text())
    assert side["files"] == ["table.csv", "table.md", "table.tex"] and side["schema"] == "table/v1"
    assert read_provenance(tmp_path / "fig.png")["schema"] == "figure/v1"
    # figures carry no time, so the same job writes the same bytes
    first = (tmp_path / "fig.png").read_bytes()
    set_job(JOB)
    try:
        _figure(tmp_path / "fig")
    finally:
        set_job(None)
    assert (tmp_path / "fig.png").read_bytes() == first


def test_config_hash_is_canonical():

    assert config_sha256({"a": 1, "b": [1, 2]}) == config_sha256({"b": [1, 2], "a": 1})
    assert config_sha256({"a": 1}) != config_sha256({"a": 2})
    assert config_sha256(None) is None


def test_pdf_provenance_keeps_escaped_characters(tmp_path):
    set_job(Job("rule_x", {"seed": 1, "note": "a (b) \\ c é"}, 1, None))
    try:
        fig, _ = plt.subplots()
        save_figure(fig, tmp_path / "fig")
    finally:
        set_job(None)
    assert read_provenance(tmp_path / "fig.pdf")["config"] == {"seed": 1, "note": "a (b) \\ c é"}
