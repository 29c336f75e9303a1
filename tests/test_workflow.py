"""The Snakemake workflow: lint, dry run, a tiny end-to-end run on .test, and bad input through it."""

import shutil
import subprocess
import sys

import pytest

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(root, *args, cwd=None, timeout=900):
    return subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(root / "Snakefile"), *args],
        cwd=cwd or root,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_lint(root):
    out = _snakemake(root, "--lint")
    assert out.returncode == 0, out.stdout + out.stderr


def test_dry_run(root):
    out = _snakemake(root, "-n", "--quiet", "rules")
    assert out.returncode == 0, out.stderr


@pytest.fixture()
def workdir(root, tmp_path):
    shutil.copytree(root / ".test" / "config", tmp_path / "config")
    return tmp_path


@pytest.mark.workflow
def test_tiny_end_to_end(root, workdir):
    from attnlens.data import load_examples
    from attnlens.io import load_json, load_model_provenance, load_parquet
    from attnlens.modeling import load_classifier

    out = _snakemake(root, "--directory", str(workdir), "--cores", "2", "--show-failed-logs")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = workdir / "results"
    train, _ = load_examples(res / "data/train.parquet")
    test, _ = load_examples(res / "data/test.parquet")
    assert len(train) == 18 and len(test) == 6
    rationales, _ = load_parquet(res / "data/rationales.parquet", "rationales/v1")
    assert len(rationales) > 0
    model, tokenizer = load_classifier(res / "models/finetuned")
    assert model.config.id2label == {0: "programming_languages", 1: "artificial_intelligence"}
    assert tokenizer.model_max_length == 128 and model.config.attention_window == [32] * 6
    assert load_model_provenance(res / "models/finetuned", "classifier/v1")["config"]["epochs"] == 1
    metrics = load_json(res / "models/train_metrics.json", "train_metrics/v1")
    assert len(metrics["epochs"]) == 1
    preds, _ = load_parquet(res / "predictions/test.parquet", "predictions/v1")
    assert sorted(preds["example_id"]) == sorted(test["example_id"])
    selection = load_json(res / "predictions/selection.json", "selection/v1")["examples"]
    roles = {s["role"] for s in selection}
    assert {"most_confident_0", "most_confident_1"} <= roles
    assert all(s["example_id"] in set(test["example_id"]) for s in selection)
    again = _snakemake(root, "--directory", str(workdir), "--cores", "2")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.workflow
def test_bad_input_is_one_line_and_leaves_no_artifact(root, workdir):
    csv = workdir / "docs.csv"
    csv.write_text("text,category\nfirst document,0\nsecond document,1\n", encoding="utf-8")
    cfg = workdir / "config" / "bad.yaml"
    cfg.write_text(f"data:\n  source: file\n  path: {csv}\n", encoding="utf-8")
    out = _snakemake(root, "--directory", str(workdir), "--cores", "1", "prepare_dataset", "--configfile", str(cfg))
    assert out.returncode != 0
    text = out.stdout + out.stderr
    lines = [ln for ln in text.splitlines() if ln.startswith("attnlens: error:")]
    assert lines and set(lines) == {
        f"attnlens: error: {csv}: label: expected a column 'label'; found ['text', 'category']"
    }
    assert "Traceback" not in text
    assert not (workdir / "results" / "data" / "train.parquet").exists()
    assert not list(workdir.glob("results/data/*"))


def test_bad_config_key_is_one_line(root, workdir):
    cfg = workdir / "config" / "bad.yaml"
    cfg.write_text("train:\n  epochz: 3\n", encoding="utf-8")
    out = _snakemake(root, "--directory", str(workdir), "-n", "--configfile", str(cfg))
    assert out.returncode != 0
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    assert any(ln.startswith("attnlens: error:") and "train.epochz: unknown key" in ln for ln in lines)
    assert "Traceback" not in out.stdout + out.stderr


def test_ruff_clean(root):
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=root, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
