"""Faults lose nothing and say one line: broken weights, a full disk while any artifact is written, SIGTERM.

* Weights: a classifier or source checkpoint whose ``model.safetensors`` is cut short, cut to its header, or
  garbage, and an artifact of ours cut short: one ``attnlens: error:`` line naming the file.
* A full disk: every writer (parquet, safetensors, JSON, CSV, figures) is pointed at ``/dev/full``, which
  fails every write with ENOSPC — the same errno a full tmpfs gives, from inside pyarrow, safetensors' Rust
  and matplotlib alike. One line, exit 1, no final file and no temporary left. Then a whole rule on a 3 MB
  tmpfs (results/ mounted in a private mount namespace, ``unshare -m``; root needed, as in CI): one line, no
  half-written artifact, and the resume on a disk with room gives the base model of the uninterrupted run.
* SIGTERM (what SLURM sends at the walltime): the writer's temporary is removed as the stop unwinds, one
  ``attnlens: stopped:`` line, exit 143. The kill-and-resume test (tests/e2e/test_rerun.py) stops a pair-attribution
  job of a real run this way and resumes it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from transformers import LongformerConfig, LongformerForSequenceClassification

from attnlens.errors import InputError
from attnlens.io import load_tensors, provenance, save_csv, save_json, save_parquet, save_tensors
from attnlens.models.checkpoints import load_classifier, packaged_model_dir
from attnlens.models.loading import source_config
from attnlens.render.figures import plot_skipped
from tests.support.helpers import (
    GUARD,
    ROOT,
    fresh_env,
    local_env,
    run_guarded,
    snakemake_cmd,
    tiny_config,
    write_config,
)


def _cut(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "header only":
        path.write_bytes(data[:20])
    else:  # garbage of the same length
        path.write_bytes(np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes())


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("clf")
    torch.manual_seed(0)
    config = LongformerConfig(
        vocab_size=64,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=40,
        attention_window=8,
    )
    LongformerForSequenceClassification(config).save_pretrained(folder)
    shutil.copy(packaged_model_dir() / "tokenizer.json", folder)
    shutil.copy(packaged_model_dir() / "tokenizer_config.json", folder)
    return folder


@pytest.mark.parametrize("how", ["half", "header only", "garbage"])
def test_broken_weights_name_the_file(classifier, tmp_path, how):
    broken = tmp_path / "clf"
    shutil.copytree(classifier, broken)
    _cut(broken / "model.safetensors", how)
    with pytest.raises(InputError) as err:
        load_classifier(broken)
    assert err.value.where == str(broken) and err.value.field == "model.safetensors"
    assert "truncated or corrupt" in err.value.expected and "\n" not in str(err.value)


def test_a_broken_source_checkpoint_and_config_name_the_file(tmp_path):
    source = tmp_path / "bert"
    shutil.copytree(packaged_model_dir(), source)
    (source / "config.json").write_text('{"model_type": "bert", ', encoding="utf-8")
    with pytest.raises(InputError) as err:
        source_config(str(source), "convert_bert")
    assert err.value.where == str(source) and err.value.field in ("config.json", "checkpoint")
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_a_cut_artifact_names_the_file(tmp_path):
    path = tmp_path / "a.safetensors"
    save_tensors({"x": torch.arange(1000.0)}, path, provenance("t/v1"))
    _cut(path, "half")
    with pytest.raises(InputError, match=r"a\.safetensors: file: expected a complete safetensors file"):
        load_tensors(path)


# --------------------------------------------------------------------------------------------- full disk

WRITERS = {
    "parquet": ("x.parquet", lambda p: save_parquet(pd.DataFrame({"a": np.arange(10**5)}), p, provenance("t/v1"))),
    "safetensors": ("x.safetensors", lambda p: save_tensors({"x": torch.zeros(10**5)}, p, provenance("t/v1"))),
    "json": ("x.json", lambda p: save_json({"a": list(range(10**4))}, p, provenance("t/v1"))),
    "csv": ("x.csv", lambda p: save_csv(pd.DataFrame({"a": np.arange(10**5)}), p)),
    "figure": ("x.png", lambda p: plot_skipped(p.with_suffix(""), "what", "why", dpi=600)),
}


def _unshare_available() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "mounting a small tmpfs needs root and unshare"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare -m failed: {probe.stderr.strip()}"


@pytest.mark.parametrize("kind", list(WRITERS))
def test_a_full_disk_says_one_line_and_leaves_nothing(tmp_path, kind):
    """Each writer on a 16 KB tmpfs (a private mount, gone when the command ends): ENOSPC from inside pyarrow,
    safetensors' Rust, json and matplotlib becomes one line, and nothing — no file, no temporary — is left."""
    why = _unshare_available()
    if why:
        pytest.skip(why)
    name, _ = WRITERS[kind]
    disk = tmp_path / "disk"
    disk.mkdir()
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from tests.e2e.test_faults import WRITERS
        from attnlens.pipeline.runtime import log_to
        final = Path({str(disk)!r}) / {name!r}
        try:
            with log_to(None, [str(final)]):
                WRITERS[{kind!r}][1](final)
        finally:
            print("left:", sorted(p.name for p in final.parent.iterdir()), flush=True)
    """)
    (tmp_path / "write.py").write_text(script, encoding="utf-8")
    mount = f"mount -t tmpfs -o size=16k tmpfs '{disk}'"
    out = run_guarded(
        ["unshare", "-m", "sh", "-c", f"{mount} && PYTHONPATH='{ROOT}' '{sys.executable}' '{tmp_path / 'write.py'}'"],
        timeout=GUARD["plan"],
        env=local_env(),
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stdout + out.stderr
    assert lines[0].startswith(f"attnlens: error: {disk / name}: disk: expected free space") and (
        "No space left on device" in lines[0] or "StorageFull" in lines[0]
    ), lines[0]
    assert out.stdout.strip() == "left: []", out.stdout


@pytest.mark.workflow
def test_a_rule_on_a_full_disk_says_one_line_and_resumes(root, tiny_run, tmp_path):
    why = _unshare_available()
    if why:
        pytest.skip(why)
    work = tmp_path / "work"
    write_config(work, tiny_config(root))
    (work / "results").mkdir()
    target = "results/models/base"
    smk = " ".join(snakemake_cmd(root, "--directory", work, "--cores", "2", target))
    # results/ on a 3 MB tmpfs, private to this command: the data fit, the base model (90 MB) does not
    script = (
        f"mount -t tmpfs -o size=3m tmpfs {work / 'results'} && {{ {smk}; echo rc=$?; }}; "
        f"cp -a {work / 'results'} {tmp_path / 'kept'}"
    )
    # jobs in fresh processes: a warm job server's forks would write outside this private mount
    out = run_guarded(["unshare", "-m", "sh", "-c", script], timeout=GUARD["stage"], env=fresh_env())
    said = out.stdout + out.stderr
    assert "rc=1" in said, said[-3000:]
    errors = [line for line in said.splitlines() if line.startswith("attnlens: error:")]
    assert errors and all("the device is full" in e for e in errors), said[-3000:]
    assert "Traceback" not in said
    kept = tmp_path / "kept"
    assert (kept / "data/train.parquet").exists() and not (kept / "models/base").exists()
    assert not [p for p in kept.rglob("*") if ".tmp-" in p.name]
    # resume where there is room: the same base model as the uninterrupted run
    shutil.rmtree(work / "results")
    shutil.copytree(kept, work / "results")
    out = run_guarded(
        snakemake_cmd(root, "--directory", work, "--cores", "2", "--rerun-incomplete", target),
        timeout=GUARD["stage"],
        env=local_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = load_file(work / target / "model.safetensors")
    want = load_file(tiny_run / target / "model.safetensors")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


# --------------------------------------------------------------------------------------------- SIGTERM


def test_sigterm_stops_cleanly_in_one_line(tmp_path):
    final = tmp_path / "big.safetensors"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from attnlens.io import atomic_path
        from attnlens.pipeline.runtime import log_to
        with log_to(None, [{str(final)!r}]):
            with atomic_path(Path({str(final)!r})) as tmp:
                tmp.write_bytes(b"half")
                print("writing", flush=True)
                time.sleep(60)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=local_env()
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert [p.name for p in tmp_path.iterdir()] == [f".big.tmp-{proc.pid}.safetensors"]
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143
    assert err.strip().splitlines() == [
        f"attnlens: stopped: SIGTERM received ({final}); no half-written artifact was kept, run the same command "
        "again to resume"
    ]
    assert list(tmp_path.iterdir()) == []
